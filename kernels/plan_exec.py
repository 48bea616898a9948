"""Executing a persistent-decode `WorkPlan` on the reference math, work by work, in fp32.

This is the CPU model of a persistent MLA decode kernel (AITER v1.2 semantics, ROCm/aiter:
the buffers of ``get_mla_metadata_v1`` in ``aiter/ops/attention.py`` and
``csrc/kernels/mla/metadata/v1_2_device.cuh``, ``mla_decode_fwd`` in ``aiter/mla.py``, the reduce
in ``csrc/kernels/mla/reduce.cu``; batch folding per ROCm/aiter#3310, the kv tail per
ROCm/aiter#2106; docs/planner.md). Each scheduled work (the ids in
``work_indptr[c]..work_indptr[c+1]`` for every program ``c``) attends its virtual q rows
``[qo_start, qo_end)`` to its kv tokens:

- pages ``kv_indices[kv_start:kv_end]`` of batch ``b = batch_idx // fold_ratio``; token
  range ``[(kv_start - kv_indptr[b]) * page_size, batch_tokens - kv_offset)``;
- causal masking by absolute position: the row ``j`` rows before its virtual batch's last
  row sees the batch's tokens ``< batch_tokens - j`` (the batch's last row is the largest
  ``qo_end`` among the works of that virtual batch);
- a work whose tile is unsplit (``partial_qo_loc == -1``) writes the final rows; a split
  work writes normalised fp32 O and LSE at partial rows ``[loc, loc + qo_end - qo_start)``;
- `reduce_partials` then merges each split tile's group into its final rows.

fp8 semantics (AITER): when q is fp8, ``P = exp(S - m)`` is rounded to q's fp8 dtype
before ``P @ V`` (``ΣP`` stays unrounded), with ``m`` the row max of the work's own scores,
so fp8-q results depend on the plan. With bf16 q no rounding happens and the result equals
the monolithic reference up to fp32 rounding whatever the plan.

Rows that no work and no reduce writes stay NaN (in `out`, `lse` and the partial
buffers), so a plan that misses rows fails loudly in any comparison.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from conformance.errors import PlanError
from conformance.numerics.fp8 import is_fp8, scale_value
from conformance.persistent.plan import WorkInfo, WorkPlan
from kernels.paged import csr_token_counts, gather_csr_kv, paged_cache_view
from kernels.reference import attend_rows


class PlanOutput(NamedTuple):
    """What `execute_plan` produces (all fp32, unwritten entries NaN)."""

    out: torch.Tensor  # [num_tokens, H, kv_lora_rank], unfolded
    lse: torch.Tensor  # [num_tokens, H], unfolded
    partial_out: torch.Tensor  # [len(reduce_partial_map) * max_seqlen_qo, H / fold, Dv]
    partial_lse: torch.Tensor  # [len(reduce_partial_map) * max_seqlen_qo, H / fold]
    partial_written: torch.Tensor  # [len(reduce_partial_map) * max_seqlen_qo] bool


def fold_rows(x: torch.Tensor, fold_ratio: int, seqlen_qo: int) -> torch.Tensor:
    """Head folding of a ``[B*S, H, ...]`` tensor into ``[B*r*S, H/r, ...]``.

    The view is ``[B, S, r, H/r, ...]`` → permute → ``[B, r, S, H/r, ...]``: virtual batch
    ``b*r + g`` holds head group ``g`` of batch ``b``, its S tokens consecutive.
    """
    if fold_ratio == 1:
        return x
    tokens, heads = x.shape[0], x.shape[1]
    if heads % fold_ratio or tokens % seqlen_qo:
        raise PlanError(
            f"fold: expected H % fold_ratio == 0 and num_tokens % max_seqlen_qo == 0, found "
            f"H={heads}, fold_ratio={fold_ratio}, num_tokens={tokens}, max_seqlen_qo={seqlen_qo}"
        )
    rest = tuple(x.shape[2:])
    batch = tokens // seqlen_qo
    view = x.reshape(batch, seqlen_qo, fold_ratio, heads // fold_ratio, *rest)
    order = (0, 2, 1, 3, *range(4, 4 + len(rest)))
    return view.permute(order).reshape(tokens * fold_ratio, heads // fold_ratio, *rest)


def unfold_rows(x: torch.Tensor, fold_ratio: int, seqlen_qo: int) -> torch.Tensor:
    """Inverse of `fold_rows`: ``[B*r*S, H/r, ...]`` back to ``[B*S, H, ...]``."""
    if fold_ratio == 1:
        return x
    rows, heads = x.shape[0], x.shape[1]
    rest = tuple(x.shape[2:])
    batch = rows // (fold_ratio * seqlen_qo)
    view = x.reshape(batch, fold_ratio, seqlen_qo, heads, *rest)
    order = (0, 2, 1, 3, *range(4, 4 + len(rest)))
    return view.permute(order).reshape(batch * seqlen_qo, fold_ratio * heads, *rest)


def resolve_p_dtype(fp8_p: torch.dtype | bool | None, q_dtype: torch.dtype) -> torch.dtype | None:
    """The dtype P is rounded to before ``P @ V``, or None for no rounding.

    ``None``: AITER's rule, q's dtype when q is fp8, else no rounding. ``False``: never.
    ``True``: q's fp8 dtype (q must be fp8). A dtype: that dtype (e.g. bf16 to model a
    tensor-core kernel, or the other e4m3 flavour).
    """
    if fp8_p is None:
        return q_dtype if is_fp8(q_dtype) else None
    if fp8_p is False:
        return None
    if fp8_p is True:
        if not is_fp8(q_dtype):
            raise ValueError(f"fp8_p=True: expected an fp8 q, found q dtype {q_dtype}")
        return q_dtype
    return fp8_p


def _scheduled_works(plan: WorkPlan) -> list[tuple[int, WorkInfo]]:
    """Work ids in the order the persistent programs run them, with their decoded rows."""
    indptr = plan.work_indptr.tolist()
    if not indptr or indptr[0] != 0:
        raise PlanError(f"work_indptr: expected to start at 0, found {indptr[:4]}")
    rows = plan.work_info_set.tolist()
    scheduled = []
    for program in range(len(indptr) - 1):
        for wid in range(indptr[program], indptr[program + 1]):
            if not 0 <= wid < len(rows):
                raise PlanError(
                    f"work_indptr[{program}]: work id {wid} outside work_info_set "
                    f"({len(rows)} rows)"
                )
            scheduled.append((wid, WorkInfo(*rows[wid])))
    return scheduled


def _token_range(
    wid: int, work: WorkInfo, batch: int, indptr: list[int], tokens: int, page_size: int
) -> tuple[int, int]:
    """The batch-relative token range ``[start, end)`` of one work, validated."""
    lo, hi = indptr[batch], indptr[batch + 1]
    if not lo <= work.kv_start <= work.kv_end <= hi:
        raise PlanError(
            f"work {wid}: expected kv_indptr[{batch}]={lo} <= kv_start <= kv_end <= "
            f"kv_indptr[{batch + 1}]={hi}, found kv_start={work.kv_start}, kv_end={work.kv_end}"
        )
    start = (work.kv_start - lo) * page_size
    end = tokens - work.kv_offset
    if not start <= end <= min(tokens, (work.kv_end - lo) * page_size):
        raise PlanError(
            f"work {wid}: token range [{start}, {end}) (batch {batch} has {tokens} tokens, "
            f"kv_offset={work.kv_offset}) does not fit pages [{work.kv_start}, {work.kv_end})"
        )
    return start, end


def execute_plan(
    plan: WorkPlan,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    page_size: int,
    sm_scale: float,
    q_scale: float | torch.Tensor = 1.0,
    kv_scale: float | torch.Tensor = 1.0,
    causal: bool = True,
    fp8_p: torch.dtype | bool | None = None,
    kv_lora_rank: int = 512,
) -> PlanOutput:
    """Run every scheduled work of `plan` in fp32, then `reduce_partials`.

    `q` ``[num_tokens, H, D]`` (unfolded; folded here by ``plan.fold_ratio``), `kv_cache`
    ``[num_blocks, page_size, D]``, the CSR page list as given to the planner. `fp8_p` as
    in `resolve_p_dtype`. Returns `PlanOutput` with unfolded ``out``/``lse``. Computes on
    the CPU (inputs on another device are copied); results are CPU tensors.
    """
    plan = plan.to("cpu")
    q, cache = q.cpu(), paged_cache_view(kv_cache).cpu()
    kv_indptr, kv_indices = kv_indptr.cpu(), kv_indices.cpu()
    kv_last_page_lens = kv_last_page_lens.cpu()
    if cache.shape[1] != page_size:
        raise ValueError(
            f"page_size: kv_cache pages hold {cache.shape[1]} tokens, found {page_size}"
        )
    if q.dim() != 3 or q.shape[-1] != cache.shape[-1]:
        raise ValueError(f"q: expected [num_tokens, H, {cache.shape[-1]}], found {tuple(q.shape)}")
    ratio, seqlen = plan.fold_ratio, plan.max_seqlen_qo
    heads = q.shape[1]
    if heads % ratio or plan.heads_per_work != heads // ratio:
        raise PlanError(
            f"plan.heads_per_work: expected H / fold_ratio = {heads} / {ratio}, found "
            f"{plan.heads_per_work}"
        )
    q_virtual = fold_rows(q, ratio, seqlen).to(torch.float32)
    rows_v, heads_v = q_virtual.shape[0], q_virtual.shape[1]
    q_s, kv_s = scale_value(q_scale), scale_value(kv_scale)
    scale = float(sm_scale) * q_s * kv_s
    p_dtype = resolve_p_dtype(fp8_p, q.dtype)
    indptr = kv_indptr.tolist()
    batches = len(indptr) - 1
    tokens_of = csr_token_counts(kv_indptr, kv_last_page_lens, page_size).tolist()

    works = _scheduled_works(plan)
    q_end: dict[int, int] = {}
    for _, w in works:
        q_end[w.batch_idx] = max(q_end.get(w.batch_idx, 0), w.qo_end)

    nan = float("nan")
    out_v = torch.full((rows_v, heads_v, kv_lora_rank), nan)
    lse_v = torch.full((rows_v, heads_v), nan)
    p_rows = len(plan.reduce_partial_map) * seqlen
    part_o = torch.full((p_rows, heads_v, kv_lora_rank), nan)
    part_lse = torch.full((p_rows, heads_v), nan)
    written = torch.zeros(p_rows, dtype=torch.bool)

    gather = functools.partial(
        gather_csr_kv, cache, kv_indptr=kv_indptr, kv_indices=kv_indices, page_size=page_size
    )
    for wid, w in works:
        batch = w.batch_idx // ratio
        if not 0 <= batch < batches or not 0 <= w.qo_start <= w.qo_end <= rows_v:
            raise PlanError(
                f"work {wid}: batch_idx {w.batch_idx} (batch {batch} of {batches}) or q rows "
                f"[{w.qo_start}, {w.qo_end}) outside {rows_v} virtual rows"
            )
        tokens = tokens_of[batch]
        start, end = _token_range(wid, w, batch, indptr, tokens, page_size)
        kv = gather(batch=batch, start=start, end=end).to(torch.float32)
        n = w.qo_end - w.qo_start
        if causal:
            rows_before_last = q_end[w.batch_idx] - 1 - torch.arange(w.qo_start, w.qo_end)
            visible = (tokens - rows_before_last - start).clamp(0, end - start)
        else:
            visible = torch.full((n,), end - start)
        o, lse = attend_rows(
            q_virtual[w.qo_start : w.qo_end],
            kv,
            visible=visible,
            scale=scale,
            v_scale=kv_s,
            kv_lora_rank=kv_lora_rank,
            p_dtype=p_dtype,
        )
        loc = w.partial_qo_loc
        if loc < 0:
            out_v[w.qo_start : w.qo_end] = o
            lse_v[w.qo_start : w.qo_end] = lse
        else:
            if loc + n > p_rows:
                raise PlanError(
                    f"work {wid}: partial rows [{loc}, {loc + n}) outside the partial buffer "
                    f"({p_rows} rows = len(reduce_partial_map) * max_seqlen_qo)"
                )
            part_o[loc : loc + n] = o
            part_lse[loc : loc + n] = lse
            written[loc : loc + n] = True

    reduce_partials(
        part_o,
        part_lse,
        reduce_indptr=plan.reduce_indptr,
        reduce_final_map=plan.reduce_final_map,
        reduce_partial_map=plan.reduce_partial_map,
        out=out_v,
        lse=lse_v,
    )
    return PlanOutput(
        out=unfold_rows(out_v, ratio, seqlen),
        lse=unfold_rows(lse_v, ratio, seqlen),
        partial_out=part_o,
        partial_lse=part_lse,
        partial_written=written,
    )


def _reduce_index(
    reduce_indptr: torch.Tensor,
    reduce_final_map: torch.Tensor,
    reduce_partial_map: torch.Tensor,
    partial_rows: int,
    partial_device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(partial row, final row) pairs of every split tile's group, as int64 tensors."""
    indptr = reduce_indptr.tolist()
    pmap = reduce_partial_map.tolist()
    src: list[int] = []
    dst: list[int] = []
    for tile in range(len(indptr) - 1):
        lo, hi = indptr[tile], indptr[tile + 1]
        if hi - lo < 2:  # unsplit tile (or a size-1 group, which AITER's reduce skips)
            continue
        q0, q1 = (int(v) for v in reduce_final_map[tile].tolist())
        for k in range(lo, hi):
            loc = pmap[k]
            if loc < 0 or loc + (q1 - q0) > partial_rows:
                raise PlanError(
                    f"reduce_partial_map[{k}] (tile {tile}): partial rows [{loc}, "
                    f"{loc + q1 - q0}) outside the partial buffer ({partial_rows} rows)"
                )
            src.extend(range(loc, loc + q1 - q0))
            dst.extend(range(q0, q1))
    device = partial_device
    return (
        torch.tensor(src, dtype=torch.int64, device=device),
        torch.tensor(dst, dtype=torch.int64, device=device),
    )


def reduce_partials(
    partial_out: torch.Tensor,
    partial_lse: torch.Tensor,
    *,
    reduce_indptr: torch.Tensor,
    reduce_final_map: torch.Tensor,
    reduce_partial_map: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge each split tile's partials into its final rows, in place; −inf safe.

    For tile ``t`` with a group ``reduce_indptr[t]..[t+1]`` of at least 2 splits, final row
    ``q0 + i`` (``(q0, q1) = reduce_final_map[t]``) merges partial rows
    ``reduce_partial_map[k] + i``: ``M = max_k lse_k``, ``w_k = exp(lse_k - M)`` (0 for a
    split with ``lse_k = -inf``, whatever its O holds), ``out = Σ w_k O_k / Σ w_k``,
    ``lse = M + log Σ w_k``. A row whose splits are all ``-inf`` gets ``out = 0``,
    ``lse = -inf``, never NaN. A NaN lse propagates (it is a bug upstream, not an empty
    split). Groups of size 0 or 1 are skipped, as AITER's reduce does. Shapes: partials
    ``[P, H, Dv]`` / ``[P, H]``, `out` ``[R, H, Dv]``, `lse` ``[R, H]``; returns (out, lse).
    """
    src, dst = _reduce_index(
        reduce_indptr, reduce_final_map, reduce_partial_map, len(partial_lse), partial_lse.device
    )
    if len(src) == 0:
        return out, lse
    rows, slot = torch.unique(dst, return_inverse=True)
    lse_k = partial_lse.index_select(0, src)
    o_k = partial_out.index_select(0, src)
    neg_inf = float("-inf")
    row_max = lse_k.new_full((len(rows), lse_k.shape[1]), neg_inf)
    row_max.scatter_reduce_(0, slot[:, None].expand_as(lse_k), lse_k, reduce="amax")
    weight = torch.where(
        lse_k == neg_inf, torch.zeros_like(lse_k), torch.exp(lse_k - row_max[slot])
    )
    contrib = torch.where((weight != 0)[..., None], weight[..., None] * o_k, 0.0)
    total = torch.zeros_like(row_max).index_add_(0, slot, weight)
    acc = o_k.new_zeros((len(rows), *o_k.shape[1:])).index_add_(0, slot, contrib)
    empty = total == 0
    merged = torch.where(empty[..., None], 0.0, acc / total[..., None])
    merged_lse = torch.where(empty, neg_inf, row_max + torch.log(total))
    out[rows] = merged.to(out.dtype)
    lse[rows] = merged_lse.to(lse.dtype)
    return out, lse
