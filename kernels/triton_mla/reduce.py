"""The reduce: merges the fp32 partials of split works into the final rows.

`mla_reduce` launches `_mla_reduce_kernel` over the plan's ``reduce_*`` maps: up to
``BLOCK_K`` partials per step with a running max, a −inf split weighted 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from conformance.persistent.plan import WorkPlan
from kernels.triton_mla.config import LATENT_DIM, REDUCE_CONFIGS, check_fault, plan_on
from kernels.triton_mla.tile import interpreted, store_rows


@triton.jit
def _mla_reduce_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    lse_ptr,
    reduce_indptr_ptr,
    reduce_final_map_ptr,
    reduce_partial_map_ptr,
    stride_po_row,
    stride_po_head,
    stride_pl_row,
    stride_pl_head,
    stride_o_tok,
    stride_o_head,
    stride_lse_tok,
    stride_lse_head,
    heads_per_work,
    fold_ratio,
    seq_q,
    BLOCK_K: tl.constexpr,
    BLOCK_H: tl.constexpr,
    D_V: tl.constexpr,
    FAULT: tl.constexpr,
):
    # One program per (qo tile, row of the tile modulo seq_q, block of BLOCK_H heads): the
    # partials of a group are merged BLOCK_K at a time with a running max, so a long group
    # (a small batch split over every SM) is a few wide loads, not one dependent load per
    # partial.
    tile = tl.program_id(0)
    row_in_tile = tl.program_id(1)
    head_block = tl.program_id(2)

    k_begin = tl.load(reduce_indptr_ptr + tile)
    k_end = tl.load(reduce_indptr_ptr + tile + 1)
    active = k_end - k_begin >= 2  # AITER skips groups of size ≤ 1 (unsplit tiles)
    if FAULT == 3:
        k_begin = k_begin + 1  # broken on purpose: the first partial is skipped
    if active:
        q_start = tl.load(reduce_final_map_ptr + 2 * tile)
        q_end = tl.load(reduce_final_map_ptr + 2 * tile + 1)
        offs_k = tl.arange(0, BLOCK_K)
        offs_v = tl.arange(0, D_V)
        heads = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
        head_ok = heads < heads_per_work
        for vrow in range(q_start + row_in_tile, q_end, seq_q):
            j = vrow - q_start
            m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
            den = tl.zeros([BLOCK_H], dtype=tl.float32)
            acc = tl.zeros([BLOCK_H, D_V], dtype=tl.float32)
            for k0 in range(k_begin, k_end, BLOCK_K):
                ks = k0 + offs_k
                k_ok = ks < k_end
                prow = (tl.load(reduce_partial_map_ptr + ks, mask=k_ok, other=0) + j).to(tl.int64)
                lse_k = tl.load(
                    part_lse_ptr + prow[:, None] * stride_pl_row + heads[None, :] * stride_pl_head,
                    mask=k_ok[:, None] & head_ok[None, :],
                    other=float("-inf"),
                )  # [BLOCK_K, BLOCK_H]
                m_new = tl.maximum(m, tl.max(lse_k, axis=0))
                m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
                rescale = tl.exp(m - m_ref)  # 0 while nothing was seen
                weight = tl.exp(lse_k - m_ref[None, :])  # 0 for a −inf split
                use = k_ok[:, None] & head_ok[None, :] & (weight > 0.0)
                o_k = tl.load(
                    part_o_ptr
                    + prow[:, None, None] * stride_po_row
                    + heads[None, :, None].to(tl.int64) * stride_po_head
                    + offs_v[None, None, :],
                    mask=use[:, :, None],
                    other=0.0,
                )  # [BLOCK_K, BLOCK_H, D_V]
                merged = tl.sum(tl.where(use[:, :, None], weight[:, :, None] * o_k, 0.0), axis=0)
                acc = acc * rescale[:, None] + merged
                den = den * rescale + tl.sum(tl.where(use, weight, 0.0), axis=0)
                m = m_new
            seen = den > 0.0
            o = acc * tl.where(seen, 1.0 / tl.where(seen, den, 1.0), 0.0)[:, None]
            m_fin = tl.where(m == float("-inf"), 0.0, m)
            lse = tl.where(seen, m_fin + tl.log(tl.where(seen, den, 1.0)), float("-inf"))
            token = (vrow // (fold_ratio * seq_q)) * seq_q + vrow % seq_q
            head = (vrow // seq_q) % fold_ratio * heads_per_work + heads
            store_rows(
                out_ptr, lse_ptr, o, lse, token, head, offs_v, head_ok, stride_o_tok,
                stride_o_head, stride_lse_tok, stride_lse_head,
            )  # fmt: skip


def mla_reduce(
    partial_o: torch.Tensor,
    partial_lse: torch.Tensor,
    plan: WorkPlan,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    _fault: str | None = None,
) -> None:
    """Merge split partials into the final rows of every split tile, in place.

    ``partial_o [P, heads, 512]`` fp32 and ``partial_lse [P, heads]`` fp32 as written by the
    decode kernel (heads = ``plan.heads_per_work``, or every head of an unfolded plan run once
    per head group); ``out [tokens, H, 512]`` and ``lse [tokens, H]`` are the final
    outputs (real, unfolded rows). For tile ``t`` the partials at rows
    ``reduce_partial_map[k] + (r - q_start)``, ``k in reduce_indptr[t]..[t+1]``, merge into virtual
    row ``r`` of ``reduce_final_map[t] = (q_start, q_end)``. A −inf split gets weight 0; a row
    whose splits are all −inf gets O = 0 and LSE = −inf. Groups with fewer than two partials
    are skipped, as AITER's reduce and `kernels.plan_exec` skip them (v1.2 never makes a
    size-1 group; v1.0 marks unsplit batches with one whose partial row is −1).
    `_fault` is a test hook (see `FAULTS`).
    """
    fault = check_fault(_fault)
    device = partial_o.device
    plan = plan_on(plan, device)
    num_tiles = plan.reduce_indptr.numel() - 1
    if num_tiles <= 0 or plan.num_partials == 0:
        return
    hpw = partial_o.shape[1]  # plan.heads_per_work, or every head for a head-group launch
    cfg = REDUCE_CONFIGS["interpreter" if interpreted() else "gpu"]
    block_h = min(cfg["BLOCK_H"], triton.next_power_of_2(hpw))
    grid = (num_tiles, max(1, plan.max_seqlen_qo), triton.cdiv(hpw, block_h))
    _mla_reduce_kernel[grid](
        partial_o,
        partial_lse,
        out,
        lse,
        plan.reduce_indptr,
        plan.reduce_final_map.contiguous(),
        plan.reduce_partial_map,
        partial_o.stride(0),
        partial_o.stride(1),
        partial_lse.stride(0),
        partial_lse.stride(1),
        out.stride(0),
        out.stride(1),
        lse.stride(0),
        lse.stride(1),
        hpw,
        plan.fold_ratio,
        max(1, plan.max_seqlen_qo),
        BLOCK_K=cfg["BLOCK_K"],
        BLOCK_H=block_h,
        D_V=LATENT_DIM,
        FAULT=fault,
        num_warps=cfg["num_warps"],
    )
