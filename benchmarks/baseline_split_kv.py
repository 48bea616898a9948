"""The classic two-stage split-KV Triton MLA decode: the comparison baseline of the benchmarks.

Written here from the algorithm's description (vLLM's ``vllm/v1/attention/ops/
triton_decode_attention.py``, adapted from SGLang's ``decode_attention.py`` and LightLLM's
``gqa_flash_decoding_stage1/2``: the "grouped" decode), not from its code:

- **Stage 1**, grid ``(rows, cdiv(H, 16), splits)``: a program takes 16 query heads of one
  query row and one of a fixed number of kv splits (split ``s`` covers tokens
  ``[s·⌈L/S⌉, min((s+1)·⌈L/S⌉, L))``). It walks its range ``BLOCK_N`` tokens at a time with a
  page lookup per token; K is loaded as ``[576, BLOCK_N]`` (latent and rope parts) for QKᵀ
  and V is loaded again as ``[BLOCK_N, 512]`` for PV; natural-exp online softmax; fp8 KV is
  dequantised on load (``x.to(fp32) · k_scale`` → bf16). It writes the normalised partial
  output and its LSE into fp32 scratch ``[rows, H, splits, 513]``.
- **Stage 2**, grid ``(rows, H)``: merges the non-empty splits by LSE into bf16 O and LSE.

Each query token is its own row (MTP tokens of one request share its block table; token
``i`` of ``s`` sees the first ``L - s + 1 + i`` tokens), as in the classic kernel.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LATENT_DIM = 512
ROPE_DIM = 64
BLOCK_H = 16  # heads per program
BLOCK_N = 32  # tokens per step
NUM_WARPS = 4
NUM_STAGES = 2


@triton.jit
def _stage1_kernel(
    q_ptr,
    kv_ptr,
    block_table_ptr,
    row_seq_lens_ptr,
    scratch_ptr,
    k_scale,
    sm_scale,
    num_heads,
    q_len,
    num_splits,
    stride_q_row,
    stride_q_head,
    stride_kv_block,
    stride_kv_slot,
    stride_bt_req,
    stride_s_row,
    stride_s_head,
    stride_s_split,
    PAGE_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_V: tl.constexpr,
    D_R: tl.constexpr,
    KV_FP8: tl.constexpr,
    DOT_T: tl.constexpr,
):
    row, head_block, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    req = row // q_len
    seq_len = tl.load(row_seq_lens_ptr + row)
    split_len = tl.cdiv(seq_len, num_splits)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    heads = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < num_heads
    offs_d = tl.arange(0, D_V)
    offs_r = tl.arange(0, D_R)
    offs_n = tl.arange(0, BLOCK_N)
    q_off = row * stride_q_row + heads[:, None] * stride_q_head
    q_nope = tl.load(q_ptr + q_off + offs_d[None, :], mask=head_ok[:, None], other=0.0)
    q_rope = tl.load(q_ptr + q_off + D_V + offs_r[None, :], mask=head_ok[:, None], other=0.0)
    q_nope = q_nope.to(DOT_T)
    q_rope = q_rope.to(DOT_T)

    e_max = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    e_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D_V], dtype=tl.float32)
    if end > start:
        for n0 in range(start, end, BLOCK_N):
            pos = n0 + offs_n
            pos_ok = pos < end
            page = tl.load(
                block_table_ptr + req * stride_bt_req + pos // PAGE_SIZE, mask=pos_ok, other=0
            )
            slot = page.to(tl.int64) * stride_kv_block + (pos % PAGE_SIZE) * stride_kv_slot
            # K as [D, N]: the latent part and the rope part.
            k = tl.load(kv_ptr + slot[None, :] + offs_d[:, None], mask=pos_ok[None, :], other=0.0)
            k_pe = tl.load(
                kv_ptr + slot[None, :] + D_V + offs_r[:, None], mask=pos_ok[None, :], other=0.0
            )
            if KV_FP8:
                k = (k.to(tl.float32) * k_scale).to(DOT_T)
                k_pe = (k_pe.to(tl.float32) * k_scale).to(DOT_T)
            else:
                k = k.to(DOT_T)
                k_pe = k_pe.to(DOT_T)
            qk = tl.dot(q_nope, k)
            qk = tl.dot(q_rope, k_pe, qk)
            qk = qk * sm_scale
            qk = tl.where(head_ok[:, None] & pos_ok[None, :], qk, float("-inf"))
            # V as [N, Dv]: the same bytes loaded again.
            v = tl.load(kv_ptr + slot[:, None] + offs_d[None, :], mask=pos_ok[:, None], other=0.0)
            if KV_FP8:
                v = (v.to(tl.float32) * k_scale).to(DOT_T)
            else:
                v = v.to(DOT_T)
            new_max = tl.maximum(e_max, tl.max(qk, axis=1))
            safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
            re_scale = tl.exp(e_max - safe_max)
            p = tl.exp(qk - safe_max[:, None])
            acc = acc * re_scale[:, None] + tl.dot(p.to(DOT_T), v)
            e_sum = e_sum * re_scale + tl.sum(p, axis=1)
            e_max = new_max
        seen = e_sum > 0.0
        out = acc / tl.where(seen, e_sum, 1.0)[:, None]
        lse = tl.where(seen, e_max + tl.log(tl.where(seen, e_sum, 1.0)), float("-inf"))
        s_off = row * stride_s_row + heads * stride_s_head + split * stride_s_split
        tl.store(scratch_ptr + s_off[:, None] + offs_d[None, :], out, mask=head_ok[:, None])
        tl.store(scratch_ptr + s_off + D_V, lse, mask=head_ok)


@triton.jit
def _stage2_kernel(
    scratch_ptr,
    row_seq_lens_ptr,
    out_ptr,
    lse_ptr,
    num_splits,
    stride_s_row,
    stride_s_head,
    stride_s_split,
    stride_o_row,
    stride_o_head,
    stride_l_row,
    D_V: tl.constexpr,
):
    row = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(row_seq_lens_ptr + row)
    split_len = tl.cdiv(seq_len, num_splits)
    offs_d = tl.arange(0, D_V)
    base = scratch_ptr + row * stride_s_row + head * stride_s_head
    e_max = float("-inf")
    e_sum = 0.0
    acc = tl.zeros([D_V], dtype=tl.float32)
    for split in range(num_splits):
        start = split * split_len
        end = tl.minimum(start + split_len, seq_len)
        if end > start:
            part = tl.load(base + split * stride_s_split + offs_d)
            part_lse = tl.load(base + split * stride_s_split + D_V)
            if part_lse > float("-inf"):
                new_max = tl.maximum(e_max, part_lse)
                old_scale = tl.exp(e_max - new_max)
                weight = tl.exp(part_lse - new_max)
                acc = acc * old_scale + weight * part
                e_sum = e_sum * old_scale + weight
                e_max = new_max
    seen = e_sum > 0.0
    out = acc / tl.where(seen, e_sum, 1.0)
    lse = tl.where(seen, e_max + tl.log(tl.where(seen, e_sum, 1.0)), float("-inf"))
    tl.store(out_ptr + row * stride_o_row + head * stride_o_head + offs_d, out.to(tl.bfloat16))
    tl.store(lse_ptr + row * stride_l_row + head, lse)


def default_num_splits(*, batch_rows: int, num_heads: int, max_seq_len: int, num_sms: int) -> int:
    """The split count: vLLM's ``pow2(L/512)`` rule capped so the grid stays near 4 waves.

    ``min(next_pow2(max(1, L // 512)), next_pow2(ceil(4·SMs / (rows · head_blocks))))``:
    long contexts get more splits, but never more than needed to fill the device, since
    every split adds fp32 scratch traffic (stage 1 writes ``B·H·splits·513`` fp32 partials).
    """
    by_length = triton.next_power_of_2(max(1, max_seq_len // 512))
    programs = batch_rows * math.ceil(num_heads / BLOCK_H)
    by_occupancy = triton.next_power_of_2(max(1, math.ceil(4 * num_sms / programs)))
    return max(1, min(by_length, by_occupancy))


def row_seq_lens(seq_lens: torch.Tensor, q_len: int) -> torch.Tensor:
    """Visible kv tokens of every query row (token ``i`` of ``s`` sees ``L - s + 1 + i``)."""
    offsets = torch.arange(q_len, device=seq_lens.device, dtype=torch.int32) - (q_len - 1)
    return (seq_lens.to(torch.int32)[:, None] + offsets[None, :]).reshape(-1).contiguous()


def split_kv_scratch(
    rows: int, num_heads: int, num_splits: int, device: torch.device | str
) -> torch.Tensor:
    """The fp32 stage-1 scratch ``[rows, H, splits, 513]``."""
    return torch.empty(
        rows, num_heads, num_splits, LATENT_DIM + 1, dtype=torch.float32, device=device
    )


def split_kv_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens_rows: torch.Tensor,
    *,
    q_len: int,
    sm_scale: float,
    num_splits: int,
    k_scale: float = 1.0,
    scratch: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-stage split-KV decode; returns (out ``[rows, H, 512]`` bf16, lse ``[rows, H]``).

    ``q [rows, H, 576]`` bf16 (rows = requests × `q_len`, token-major within a request),
    ``kv_cache [blocks, page, 576]`` bf16 or fp8 (dequantised on load with `k_scale`),
    ``block_table [requests, max_pages]`` int32, ``seq_lens_rows [rows]``: visible tokens of
    each row (`row_seq_lens`).
    """
    rows, num_heads, width = q.shape
    if width != LATENT_DIM + ROPE_DIM:
        raise ValueError(f"q must be [rows, H, {LATENT_DIM + ROPE_DIM}], got {tuple(q.shape)}")
    if kv_cache.dim() != 3 or kv_cache.shape[-1] != width:
        raise ValueError(f"kv_cache must be [blocks, page, {width}], got {tuple(kv_cache.shape)}")
    if seq_lens_rows.numel() != rows:
        raise ValueError(f"seq_lens_rows has {seq_lens_rows.numel()} entries, q has {rows} rows")
    device = q.device
    if scratch is None:
        scratch = split_kv_scratch(rows, num_heads, num_splits, device)
    if scratch.shape != (rows, num_heads, num_splits, LATENT_DIM + 1):
        raise ValueError(f"scratch must be [{rows}, {num_heads}, {num_splits}, 513]")
    if out is None:
        out = torch.empty(rows, num_heads, LATENT_DIM, dtype=torch.bfloat16, device=device)
    if lse is None:
        lse = torch.empty(rows, num_heads, dtype=torch.float32, device=device)
    interpreted = type(_stage1_kernel).__name__ == "InterpretedFunction"
    kv_fp8 = kv_cache.dtype not in (torch.bfloat16, torch.float16)
    page_size = kv_cache.shape[1]
    _stage1_kernel[(rows, triton.cdiv(num_heads, BLOCK_H), num_splits)](
        q,
        kv_cache,
        block_table,
        seq_lens_rows,
        scratch,
        float(k_scale),
        float(sm_scale),
        num_heads,
        q_len,
        num_splits,
        q.stride(0),
        q.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        block_table.stride(0),
        scratch.stride(0),
        scratch.stride(1),
        scratch.stride(2),
        PAGE_SIZE=page_size,
        BLOCK_H=BLOCK_H,
        BLOCK_N=BLOCK_N,
        D_V=LATENT_DIM,
        D_R=ROPE_DIM,
        KV_FP8=kv_fp8,
        DOT_T=tl.float32 if interpreted else tl.bfloat16,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
    _stage2_kernel[(rows, num_heads)](
        scratch,
        seq_lens_rows,
        out,
        lse,
        num_splits,
        scratch.stride(0),
        scratch.stride(1),
        scratch.stride(2),
        out.stride(0),
        out.stride(1),
        lse.stride(0),
        D_V=LATENT_DIM,
        num_warps=4,
    )
    return out, lse
