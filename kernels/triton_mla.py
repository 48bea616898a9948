"""Triton persistent MLA decode over an AITER-v1 work plan, plus its reduce kernel.

The CUDA backend's decode: `persistent_mla_decode` launches one program per entry of the
plan's ``work_indptr`` (minus one); program ``c`` executes works
``work_indptr[c]..work_indptr[c+1]``. A work covers the virtual q rows ``[qo_start, qo_end)``
of virtual batch ``batch_idx`` (``heads_per_work`` heads each) and the kv token range
``[kv_start_token, batch_tokens - kv_offset)`` of real batch ``batch_idx // fold_ratio``.
Unsplit works (``partial_qo_loc == -1``) write the final bf16 output and natural-log LSE;
split works write the normalised fp32 partial output and LSE, which `mla_reduce` merges.

Kernel design (research note perf_anchors.md §7): (q token × head) pairs are packed densely
into ``BLOCK_M`` rows; each KV tile is loaded once and ``kv[:, :512]`` serves both as Kᵀ for
QK and as V for PV, ``kv[:, 512:]`` only feeds the rope dot; ``sm_scale·q_scale·kv_scale·log2 e``
is folded into the score scale and the softmax uses exp2; the output is multiplied by
``kv_scale`` once at the end; accumulation is fp32. Dot operands: bf16 (fp8 q/KV converted to
bf16, which is exact); with e4m3 q and e4m3 KV on a GPU the QK dot takes the e4m3 operands
as they are and, when P is rounded to e4m3, PV runs in fp16 (e4m3 V and P are exact in fp16).
P is rounded to bf16 for the PV dot, or to e4m3 under AITER's fp8-q rule (`fp8_p`), with ΣP
unrounded. The causal mask is applied by kv position from the global rule: query token ``i``
of a request with ``s`` q tokens and ``L`` kv tokens sees positions ``[0, L - s + i]``. A row
that sees no kv token gets O = 0 and LSE = −inf.

Loop structure: the tiles below every row's causal limit and the work's kv end run unmasked
(no load masks, no score mask; the page id of the next tile is read one tile ahead, so
Triton's pipeliner gives the KV loads all of ``num_stages``); the last, partial tiles run
masked. Launch modes (`persistent_mla_decode`): one program per plan slice; or, to read each
KV range with several programs side by side (the second read mostly hits L2), a grid of
(head groups × slices) — for a folded plan with ``SPLIT_GROUPS``, or for an unfolded plan made
for a divisor of the head count, run once per head group. The reduce merges up to 16 partials
per step with a running max.

Triton 3.9's interpreter multiplies bf16 ``tl.dot`` operands as their raw uint16 bits, so under
the interpreter the (bf16-rounded) operands are widened to fp32 before each dot (``DOT_T``);
the values, and so the results, are the same as the bf16 dots on a GPU. (The interpreter also
truncates fp32→bf16 conversions where a GPU rounds to nearest.)

Tile configurations live in `DECODE_CONFIGS` / `REDUCE_CONFIGS` so they can be tuned.

This module imports Triton at import time; set ``TRITON_INTERPRET=1`` *before* importing it
to run the kernels on the CPU interpreter.
"""

from __future__ import annotations

import math
import warnings

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from conformance.persistent.plan import WorkPlan

LATENT_DIM = 512  # kv_lora_rank: the V width and the "nope" part of the key
ROPE_DIM = 64  # qk_rope_head_dim
CACHE_DIM = LATENT_DIM + ROPE_DIM  # 576
LOG2E = 1.4426950408889634

# Test hooks: deliberately broken kernel variants used only by the negative controls in
# tests/selftest/test_triton_mla.py. Never pass `_fault` in production code.
FAULTS: dict[str | None, int] = {
    None: 0,
    "read_past_end": 1,  # decode reads whole pages up to kv_end, ignoring the last-page length
    "drop_kv_scale": 2,  # decode ignores kv_scale (in the scores and on the output)
    "skip_partial": 3,  # reduce skips the first partial of every group
    "skip_head_group": 4,  # head-group launches: the programs of group 1 skip every work
}

# Decode tile configurations keyed by (BLOCK_M, kv kind). BLOCK_M is the number of packed
# (q token × head) rows per program iteration. Tuned on an H200 (Triton 3.6, torch 2.11) by
# `python -m benchmarks.bench_decode --tune` (results: benchmarks/results/). Measured there:
# 8 warps beat 4 everywhere (4 warps spill the 255-register budget); BLOCK_N 64 beats 32
# (the page size: one page lookup per tile); 3 stages (2 KV buffers: the page id is read a
# tile ahead) where shared memory allows, 2 at 64 rows (Q alone takes 72 KiB). Optional
# keys: SPLIT_GROUPS (folded plans: head groups on programs side by side), QK_FP8, V_F16,
# F16_TILE, REG_PREFETCH (fp8 code paths, see `persistent_mla_decode`).
DECODE_CONFIGS: dict[tuple[int, str], dict[str, int]] = {
    (16, "bf16"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    (32, "bf16"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    (64, "bf16"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
    (16, "fp8"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    (32, "fp8"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    (64, "fp8"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
}

# Reduce configurations: partials merged per step (BLOCK_K) and heads per program (BLOCK_H).
# On a GPU one head per program and 16 partials per step (a 32 KiB load); under the
# interpreter, whose cost is per program and per op, 16 heads per program.
REDUCE_CONFIGS: dict[str, dict[str, int]] = {
    "gpu": {"BLOCK_K": 16, "BLOCK_H": 1, "num_warps": 4},
    "interpreter": {"BLOCK_K": 4, "BLOCK_H": 16, "num_warps": 4},
}

# num_stages that compiled, for configs whose requested depth ran out of shared memory.
_STAGE_LIMITS: dict[tuple[object, ...], int] = {}

MAX_BLOCK_M = 64  # 64 × 512 fp32 accumulator rows is the register budget (perf_anchors §7.2)
MMA_V3_MIN_ROWS = 64  # fewer rows per program compile to mma.sync (no fp8 operands) on sm_90
MIN_BLOCK_M = 16  # tl.dot needs M ≥ 16

_FP8_DTYPES = tuple(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2")
    if hasattr(torch, name)
)


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _operand(x, DOT_T: tl.constexpr, KEEP_FP8: tl.constexpr):
    """A dot operand: kept as loaded (fp8 tensor-core path) or via bf16 to ``DOT_T``."""
    if KEEP_FP8:
        return x
    else:
        return x.to(tl.bfloat16).to(DOT_T)


@triton.jit
def _load_tile(kv_base, kv_offs, rope_offs, pos, tok_hi, MASKED: tl.constexpr):
    """A KV tile: its ``[BLOCK_N, 512]`` latent block (Kᵀ and V) and ``[BLOCK_N, 64]`` rope."""
    if MASKED:
        pos_ok = pos < tok_hi
        kv = tl.load(kv_base + kv_offs, mask=pos_ok[:, None], other=0.0)
        k_rope = tl.load(kv_base + rope_offs, mask=pos_ok[:, None], other=0.0)
    else:
        kv = tl.load(kv_base + kv_offs)
        k_rope = tl.load(kv_base + rope_offs)
    return kv, k_rope


@triton.jit
def _attend(
    acc,
    m_i,
    l_i,
    q_nope,
    q_rope,
    kv,
    k_rope,
    pos,
    row_hi,
    score_scale,
    MASKED: tl.constexpr,
    DOT_T: tl.constexpr,
    QK_FP8: tl.constexpr,
    P_FP8: tl.constexpr,
    V_F16: tl.constexpr,
    F16_TILE: tl.constexpr,
    ABLATE: tl.constexpr,
):
    """One KV tile of the online softmax: QK (latent + rope), exp2 softmax update, PV.

    The latent block `kv` serves as Kᵀ and as V. Unmasked tiles (every token valid and
    visible to every row) skip the score mask.
    """
    if F16_TILE:
        # e4m3 tile to fp16 (exact): the mma.sync path (fewer than 64 rows) has no fp8
        # operands.
        kv = kv.to(tl.float16)
        k_rope = k_rope.to(tl.float16)
    if ABLATE == 2:  # timing probe only: no QK dot (the rope block is not read)
        scores = tl.zeros([q_nope.shape[0], kv.shape[0]], dtype=tl.float32)
    elif F16_TILE:
        scores = tl.dot(q_nope, tl.trans(kv))
        scores = tl.dot(q_rope, tl.trans(k_rope), scores)
    else:
        k_op = _operand(kv, DOT_T, QK_FP8)
        scores = tl.dot(q_nope, tl.trans(k_op))
        scores = tl.dot(q_rope, tl.trans(_operand(k_rope, DOT_T, QK_FP8)), scores)
    scores = scores * score_scale
    if MASKED:
        visible = pos[None, :] < row_hi[:, None]
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_ref = m_new
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(scores - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if P_FP8:
        p8 = p.to(tl.float8e4nv)  # AITER's fp8-q rule; ΣP unrounded
        if V_F16 or F16_TILE:
            p_op = p8.to(tl.float16)
        else:
            p_op = p8.to(DOT_T)
    else:
        p_op = p.to(tl.bfloat16).to(DOT_T)
    if F16_TILE:
        v_op = kv
    elif V_F16:
        # e4m3 V and e4m3-rounded P are exact in fp16: one cvt per two values, fp16 MMA.
        v_op = kv.to(tl.float16)
    else:
        v_op = _operand(kv, DOT_T, False)
    acc = acc * alpha[:, None]
    if ABLATE != 1:  # ABLATE == 1, a timing probe only: no PV dot
        acc = tl.dot(p_op, v_op, acc)
    return acc, m_new, l_i


@triton.jit
def _persistent_mla_decode_kernel(
    q_ptr,
    kv_ptr,
    out_ptr,
    lse_ptr,
    part_o_ptr,
    part_lse_ptr,
    work_indptr_ptr,
    work_info_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    kv_last_page_lens_ptr,
    qo_indptr_ptr,
    q_scale_ptr,
    kv_scale_ptr,
    q_scale_value,
    kv_scale_value,
    sm_scale_log2,
    stride_q_tok,
    stride_q_head,
    stride_kv_block,
    stride_kv_slot,
    stride_o_tok,
    stride_o_head,
    stride_lse_tok,
    stride_lse_head,
    stride_po_row,
    stride_po_head,
    stride_pl_row,
    stride_pl_head,
    heads_per_work,
    fold_ratio,
    seq_q,
    PAGE_SIZE: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_V: tl.constexpr,
    D_R: tl.constexpr,
    DOT_T: tl.constexpr,
    QK_FP8: tl.constexpr,
    P_FP8: tl.constexpr,
    V_F16: tl.constexpr,
    F16_TILE: tl.constexpr,
    REG_PREFETCH: tl.constexpr,
    SCALES_IN_MEMORY: tl.constexpr,
    GROUP_MODE: tl.constexpr,
    ABLATE: tl.constexpr,
    FAULT: tl.constexpr,
):
    # GROUP_MODE 0: program p walks slice p. Otherwise the grid is (groups, programs) and the
    # programs (g, p) of every g walk slice p at once, so the KV of one range is read by
    # `groups` programs side by side (the second read mostly hits L2): GROUP_MODE 1 (a folded
    # plan) has program g take only the works of head group g; GROUP_MODE 2 (a plan made for
    # heads_per_work of the H = groups · heads_per_work heads) has it take every work, for
    # heads [g · heads_per_work, (g + 1) · heads_per_work).
    if GROUP_MODE == 0:
        pid = tl.program_id(0)
        grp = 0
    else:
        pid = tl.program_id(1)
        grp = tl.program_id(0)
    work_begin = tl.load(work_indptr_ptr + pid)
    work_end = tl.load(work_indptr_ptr + pid + 1)

    if SCALES_IN_MEMORY:
        q_scale = tl.load(q_scale_ptr)
        kv_scale = tl.load(kv_scale_ptr)
    else:
        q_scale = q_scale_value
        kv_scale = kv_scale_value
    if FAULT == 2:
        kv_scale = kv_scale * 0.0 + 1.0
    score_scale = sm_scale_log2 * q_scale * kv_scale

    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_v = tl.arange(0, D_V)
    offs_r = tl.arange(0, D_R)
    # Loop-invariant int32 offsets of a tile inside its page (tiles never straddle pages when
    # PAGE_SIZE >= BLOCK_N): only a scalar base pointer changes from tile to tile.
    tile_kv_offs = offs_n[:, None] * stride_kv_slot + offs_v[None, :]
    tile_rope_offs = offs_n[:, None] * stride_kv_slot + (D_V + offs_r)[None, :]

    for w in range(work_begin, work_end):
        info = work_info_ptr + w * 8
        vbatch = tl.load(info + 0)
        partial_loc = tl.load(info + 1)
        qo_start = tl.load(info + 2)
        qo_end = tl.load(info + 3)
        kv_start = tl.load(info + 4)
        kv_end = tl.load(info + 5)
        kv_offset = tl.load(info + 6)

        batch = vbatch // fold_ratio
        group = vbatch % fold_ratio
        part_head = 0  # first head of this program's heads in a partial row
        if GROUP_MODE == 2:
            group = grp
            part_head = grp * heads_per_work
        q_begin = tl.load(qo_indptr_ptr + batch)
        q_len = tl.load(qo_indptr_ptr + batch + 1) - q_begin
        page_begin = tl.load(kv_indptr_ptr + batch)
        num_pages = tl.load(kv_indptr_ptr + batch + 1) - page_begin
        last_len = tl.load(kv_last_page_lens_ptr + batch)
        kv_len = tl.where(num_pages > 0, (num_pages - 1) * PAGE_SIZE + last_len, 0)
        if PAGE_SIZE == 1:
            kv_len = num_pages
        tok_lo = (kv_start - page_begin) * PAGE_SIZE
        tok_hi = kv_len - kv_offset
        if FAULT == 1:
            # Broken on purpose: whole pages up to kv_end, last-page length ignored.
            tok_hi = (kv_end - page_begin) * PAGE_SIZE
            kv_len = num_pages * PAGE_SIZE

        num_rows = (qo_end - qo_start) * heads_per_work
        if GROUP_MODE == 1:
            num_rows = tl.where(group == grp, num_rows, 0)  # another program's head group
        if FAULT == 4 and GROUP_MODE != 0:
            num_rows = tl.where(grp == 1, 0, num_rows)  # broken on purpose: group 1 idles
        for m0 in range(0, num_rows, BLOCK_M):
            rows = m0 + offs_m
            row_ok = rows < num_rows
            vrow = qo_start + rows // heads_per_work  # virtual q row
            head_local = rows % heads_per_work
            # Virtual row -> real token: [B, r, S] order -> [B, S] (identity when r == 1).
            token = (vrow // (fold_ratio * seq_q)) * seq_q + vrow % seq_q
            head = group * heads_per_work + head_local
            if CAUSAL:
                row_hi = tl.minimum(kv_len - q_len + (token - q_begin) + 1, tok_hi)
            else:
                row_hi = tl.zeros([BLOCK_M], dtype=tl.int32) + tok_hi
            # Tiles below every row's limit need neither load masks nor a score mask.
            full_hi = tl.min(tl.where(row_ok, row_hi, tok_hi), axis=0)
            n_full = tok_lo + tl.maximum(full_hi - tok_lo, 0) // BLOCK_N * BLOCK_N

            q_row = token.to(tl.int64) * stride_q_tok + head.to(tl.int64) * stride_q_head
            q_nope = tl.load(
                q_ptr + q_row[:, None] + offs_v[None, :], mask=row_ok[:, None], other=0.0
            )
            q_rope = tl.load(
                q_ptr + q_row[:, None] + D_V + offs_r[None, :], mask=row_ok[:, None], other=0.0
            )
            if F16_TILE:
                q_nope = q_nope.to(tl.float16)
                q_rope = q_rope.to(tl.float16)
            else:
                q_nope = _operand(q_nope, DOT_T, QK_FP8)
                q_rope = _operand(q_rope, DOT_T, QK_FP8)

            m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
            acc = tl.zeros([BLOCK_M, D_V], dtype=tl.float32)

            if PAGE_SIZE >= BLOCK_N:
                # The page id of the next tile is read one iteration ahead, so the KV loads
                # do not hang on a load of the same iteration (the pipeliner then gives them
                # every stage instead of splitting the stages along the indirection).
                last_page = tl.maximum(num_pages - 1, 0)
                has_pages = num_pages > 0
                page = tl.load(
                    kv_indices_ptr + page_begin + tl.minimum(tok_lo // PAGE_SIZE, last_page),
                    mask=has_pages,
                    other=0,
                )
                if REG_PREFETCH:
                    # The tile of the next iteration is loaded into registers by hand (the
                    # pipeliner leaves loads whose e4m3 values are converted before the dots
                    # unpipelined): one tile of look-ahead.
                    kv_base = (
                        kv_ptr
                        + page.to(tl.int64) * stride_kv_block
                        + (tok_lo % PAGE_SIZE) * stride_kv_slot
                    )
                    any_full = n_full > tok_lo
                    kv_next = tl.load(kv_base + tile_kv_offs, mask=any_full, other=0.0)
                    rope_next = tl.load(kv_base + tile_rope_offs, mask=any_full, other=0.0)
                    next_page = tl.minimum((tok_lo + BLOCK_N) // PAGE_SIZE, last_page)
                    page = tl.load(kv_indices_ptr + page_begin + next_page, mask=has_pages, other=0)
                    for n0 in range(tok_lo, n_full, BLOCK_N):
                        kv = kv_next
                        k_rope = rope_next
                        n1 = n0 + BLOCK_N
                        kv_base = (
                            kv_ptr
                            + page.to(tl.int64) * stride_kv_block
                            + (n1 % PAGE_SIZE) * stride_kv_slot
                        )
                        more = n1 < n_full
                        kv_next = tl.load(kv_base + tile_kv_offs, mask=more, other=0.0)
                        rope_next = tl.load(kv_base + tile_rope_offs, mask=more, other=0.0)
                        next_page = tl.minimum((n1 + BLOCK_N) // PAGE_SIZE, last_page)
                        page = tl.load(
                            kv_indices_ptr + page_begin + next_page, mask=has_pages, other=0
                        )
                        acc, m_i, l_i = _attend(
                            acc, m_i, l_i, q_nope, q_rope, kv, k_rope, n0 + offs_n, row_hi,
                            score_scale, MASKED=False, DOT_T=DOT_T, QK_FP8=QK_FP8, P_FP8=P_FP8,
                            V_F16=V_F16, F16_TILE=F16_TILE, ABLATE=ABLATE,
                        )  # fmt: skip
                else:
                    for n0 in range(tok_lo, n_full, BLOCK_N):
                        kv_base = (
                            kv_ptr
                            + page.to(tl.int64) * stride_kv_block
                            + (n0 % PAGE_SIZE) * stride_kv_slot
                        )
                        next_page = tl.minimum((n0 + BLOCK_N) // PAGE_SIZE, last_page)
                        page = tl.load(
                            kv_indices_ptr + page_begin + next_page, mask=has_pages, other=0
                        )
                        kv, k_rope = _load_tile(
                            kv_base, tile_kv_offs, tile_rope_offs, n0 + offs_n, tok_hi, False
                        )
                        acc, m_i, l_i = _attend(
                            acc, m_i, l_i, q_nope, q_rope, kv, k_rope, n0 + offs_n, row_hi,
                            score_scale, MASKED=False, DOT_T=DOT_T, QK_FP8=QK_FP8, P_FP8=P_FP8,
                            V_F16=V_F16, F16_TILE=F16_TILE, ABLATE=ABLATE,
                        )  # fmt: skip
                for n0 in tl.range(n_full, tok_hi, BLOCK_N, num_stages=1):
                    page = tl.load(kv_indices_ptr + page_begin + n0 // PAGE_SIZE)
                    kv_base = (
                        kv_ptr
                        + page.to(tl.int64) * stride_kv_block
                        + (n0 % PAGE_SIZE) * stride_kv_slot
                    )
                    kv, k_rope = _load_tile(
                        kv_base, tile_kv_offs, tile_rope_offs, n0 + offs_n, tok_hi, True
                    )
                    acc, m_i, l_i = _attend(
                        acc, m_i, l_i, q_nope, q_rope, kv, k_rope, n0 + offs_n, row_hi,
                        score_scale, MASKED=True, DOT_T=DOT_T, QK_FP8=QK_FP8, P_FP8=P_FP8,
                        V_F16=V_F16, F16_TILE=F16_TILE, ABLATE=ABLATE,
                    )  # fmt: skip
            else:
                # Pages smaller than a tile: one page lookup per token, every tile masked.
                for n0 in range(tok_lo, tok_hi, BLOCK_N):
                    pos = n0 + offs_n
                    page = tl.load(
                        kv_indices_ptr + page_begin + pos // PAGE_SIZE, mask=pos < tok_hi, other=0
                    )
                    kv_row = page.to(tl.int64) * stride_kv_block + (
                        (pos % PAGE_SIZE).to(tl.int64) * stride_kv_slot
                    )
                    kv, k_rope = _load_tile(
                        kv_ptr, kv_row[:, None] + offs_v[None, :],
                        kv_row[:, None] + D_V + offs_r[None, :], pos, tok_hi, True,
                    )  # fmt: skip
                    acc, m_i, l_i = _attend(
                        acc, m_i, l_i, q_nope, q_rope, kv, k_rope, pos, row_hi, score_scale,
                        MASKED=True, DOT_T=DOT_T, QK_FP8=QK_FP8, P_FP8=P_FP8,
                        V_F16=V_F16, F16_TILE=F16_TILE, ABLATE=ABLATE,
                    )  # fmt: skip

            seen = l_i > 0.0
            inv_l = tl.where(seen, kv_scale / tl.where(seen, l_i, 1.0), 0.0)
            o = acc * inv_l[:, None]
            lse = tl.where(
                seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) / 1.4426950408889634, float("-inf")
            )
            if partial_loc < 0:
                o_row = token.to(tl.int64) * stride_o_tok + head.to(tl.int64) * stride_o_head
                tl.store(
                    out_ptr + o_row[:, None] + offs_v[None, :],
                    o.to(out_ptr.dtype.element_ty),
                    mask=row_ok[:, None],
                )
                l_off = token.to(tl.int64) * stride_lse_tok + head.to(tl.int64) * stride_lse_head
                tl.store(lse_ptr + l_off, lse, mask=row_ok)
            else:
                prow = (partial_loc + vrow - qo_start).to(tl.int64)
                phead = (part_head + head_local).to(tl.int64)
                po_row = prow * stride_po_row + phead * stride_po_head
                tl.store(part_o_ptr + po_row[:, None] + offs_v[None, :], o, mask=row_ok[:, None])
                pl_off = prow * stride_pl_row + phead * stride_pl_head
                tl.store(part_lse_ptr + pl_off, lse, mask=row_ok)


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
            o_row = token.to(tl.int64) * stride_o_tok + head.to(tl.int64) * stride_o_head
            tl.store(
                out_ptr + o_row[:, None] + offs_v[None, :],
                o.to(out_ptr.dtype.element_ty),
                mask=head_ok[:, None],
            )
            l_off = token.to(tl.int64) * stride_lse_tok + head.to(tl.int64) * stride_lse_head
            tl.store(lse_ptr + l_off, lse, mask=head_ok)


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------


def interpreted() -> bool:
    """Whether the kernels were decorated under ``TRITON_INTERPRET=1`` (CPU interpreter)."""
    return type(_persistent_mla_decode_kernel).__name__ == "InterpretedFunction"


def _kv_kind(dtype: torch.dtype) -> str:
    return "fp8" if dtype in _FP8_DTYPES else "bf16"


def select_block_m(plan: WorkPlan) -> int:
    """Packed rows per program iteration: next power of two of the largest tile, in [16, 64]."""
    rows = max(1, plan.max_seqlen_qo * plan.heads_per_work)
    return max(MIN_BLOCK_M, min(MAX_BLOCK_M, triton.next_power_of_2(rows)))


def select_decode_config(plan: WorkPlan, kv_dtype: torch.dtype) -> dict[str, int]:
    """The decode tile configuration (BLOCK_M, BLOCK_N, num_warps, num_stages) for a case."""
    block_m = select_block_m(plan)
    return {"BLOCK_M": block_m, **DECODE_CONFIGS[(block_m, _kv_kind(kv_dtype))]}


def _scale_args(
    value: float | torch.Tensor, device: torch.device, name: str
) -> tuple[torch.Tensor | None, float]:
    """A per-tensor scale as (device tensor or None, host value).

    A Python float travels as a kernel argument (no device allocation, no extra launch); a
    one-element tensor is read on the device, without a host sync.
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a per-tensor scale (1 element), got {value.shape}")
        return value.reshape(1).to(device=device, dtype=torch.float32), 1.0
    return None, float(value)


def _index_tensor(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.to(device=device, dtype=torch.int32).contiguous()


def _plan_on(plan: WorkPlan, device: torch.device) -> WorkPlan:
    if plan.work_indptr.device == device:
        return plan
    return plan.to(device)


def _check_fault(fault: str | None) -> int:
    if fault not in FAULTS:
        raise ValueError(f"_fault must be one of {sorted(k for k in FAULTS if k)}, got {fault!r}")
    return FAULTS[fault]


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
    fault = _check_fault(_fault)
    device = partial_o.device
    plan = _plan_on(plan, device)
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


def persistent_mla_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    plan: WorkPlan,
    *,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    qo_indptr: torch.Tensor,
    page_size: int,
    sm_scale: float,
    q_scale: float | torch.Tensor = 1.0,
    kv_scale: float | torch.Tensor = 1.0,
    causal: bool = True,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    fp8_p: bool | None = None,
    config: dict[str, int] | None = None,
    _fault: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the persistent MLA decode kernel over `plan`, then the reduce; return (out, lse).

    q ``[tokens, H, 576]`` bf16 (or fp8 e4m3 with `q_scale`); kv_cache
    ``[num_blocks, page_size, 576]`` (a ``[num_blocks, page_size, 1, 576]`` view is accepted)
    bf16 or fp8 with `kv_scale`; output ``[tokens, H, 512]`` bf16 and LSE ``[tokens, H]`` fp32
    (natural log). ``H`` must equal ``plan.heads_per_work * plan.fold_ratio``, or be a multiple
    of ``plan.heads_per_work`` for an unfolded plan (``fold_ratio == 1``): the plan then runs
    once per group of ``heads_per_work`` heads, the groups' programs side by side. Scales are
    Python floats (kernel arguments) or one-element tensors (read on the device, no host
    sync). `fp8_p`: whether P is rounded to e4m3 before ``P @ V`` (the normaliser ΣP stays
    unrounded); None follows AITER (round iff q is fp8), as `kernels.plan_exec` does;
    otherwise P is rounded to bf16.
    `config` overrides the selected tile configuration (keys BLOCK_M, BLOCK_N, num_warps,
    num_stages) and takes launch options: SPLIT_GROUPS (a folded plan's head groups on
    programs side by side), QK_FP8 / V_F16 (fp8 tensor-core paths, default on), F16_TILE /
    REG_PREFETCH (fp8 variants for fewer than 64 rows, default off), ABLATE (timing probes
    only: 1 drops the PV dot, 2 the QK dot; the results are wrong).
    `_fault` is a test hook that selects a deliberately broken kernel (see `FAULTS`).
    """
    fault = _check_fault(_fault)
    device = q.device
    if q.dim() != 3 or q.shape[-1] != CACHE_DIM:
        raise ValueError(f"q must be [tokens, H, {CACHE_DIM}], got {tuple(q.shape)}")
    if kv_cache.dim() == 4 and kv_cache.shape[2] == 1:
        kv_cache = kv_cache.squeeze(2)
    if kv_cache.dim() != 3 or kv_cache.shape[1:] != (page_size, CACHE_DIM):
        raise ValueError(
            f"kv_cache must be [num_blocks, page_size={page_size}, {CACHE_DIM}], "
            f"got {tuple(kv_cache.shape)}"
        )
    if kv_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("q and kv_cache must be contiguous in their last dimension")
    if page_size < 1 or page_size & (page_size - 1):
        raise ValueError(f"page_size must be a power of two, got {page_size}")
    num_tokens, num_heads, _ = q.shape
    hpw = plan.heads_per_work
    if num_heads == hpw * plan.fold_ratio:
        head_groups = 1  # the plan covers every head
    elif plan.fold_ratio == 1 and num_heads % hpw == 0:
        head_groups = num_heads // hpw  # one plan, run once per group of hpw heads
    else:
        raise ValueError(
            f"q has {num_heads} heads but the plan has heads_per_work={hpw} × "
            f"fold_ratio={plan.fold_ratio} (nor is it an unfolded plan for a divisor of "
            f"{num_heads} heads)"
        )
    round_p = q.dtype in _FP8_DTYPES if fp8_p is None else bool(fp8_p)
    plan = _plan_on(plan, device)
    if out is None:
        out = torch.empty(num_tokens, num_heads, LATENT_DIM, dtype=torch.bfloat16, device=device)
    if lse is None:
        lse = torch.empty(num_tokens, num_heads, dtype=torch.float32, device=device)
    if out.shape != (num_tokens, num_heads, LATENT_DIM) or out.stride(-1) != 1:
        raise ValueError(f"out must be [{num_tokens}, {num_heads}, {LATENT_DIM}], got {out.shape}")
    if lse.shape != (num_tokens, num_heads):
        raise ValueError(f"lse must be [{num_tokens}, {num_heads}], got {tuple(lse.shape)}")

    seq_q = max(1, plan.max_seqlen_qo)
    partial_rows = plan.reduce_partial_map.numel() * seq_q
    part_heads = hpw * head_groups
    partial_o = torch.empty(
        partial_rows, part_heads, LATENT_DIM, dtype=torch.float32, device=device
    )
    partial_lse = torch.empty(partial_rows, part_heads, dtype=torch.float32, device=device)

    cfg = dict(select_decode_config(plan, kv_cache.dtype))
    if config:
        cfg.update(config)
    split_groups = bool(cfg.pop("SPLIT_GROUPS", False)) and plan.fold_ratio > 1
    if head_groups > 1:
        group_mode, groups = 2, head_groups
    elif split_groups:
        group_mode, groups = 1, plan.fold_ratio
    else:
        group_mode, groups = 0, 1
    q_scale_t, q_scale_v = _scale_args(q_scale, device, "q_scale")
    kv_scale_t, kv_scale_v = _scale_args(kv_scale, device, "kv_scale")
    scales_in_memory = q_scale_t is not None or kv_scale_t is not None
    if scales_in_memory:  # both read on the device
        ones = torch.ones(1, dtype=torch.float32, device=device)
        q_scale_t = ones if q_scale_t is None else q_scale_t * 1.0
        kv_scale_t = ones if kv_scale_t is None else kv_scale_t * 1.0
        q_scale_t = q_scale_t * q_scale_v
        kv_scale_t = kv_scale_t * kv_scale_v
    # e4m3 q and e4m3 KV: QK runs on fp8 tensor cores, no conversion (exact either way).
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    qk_fp8 = bool(
        cfg.pop("QK_FP8", True) and not interpreted() and q.dtype == kv_cache.dtype == e4m3
    )
    # e4m3 KV with P rounded to e4m3: V and P are exact in fp16, so PV runs on fp16 MMAs.
    v_f16 = bool(
        cfg.pop("V_F16", True) and not interpreted() and round_p and kv_cache.dtype == e4m3
    )
    # Fewer than 64 rows (mma.sync, no fp8 operands): e4m3 q and tile to fp16 once (off by
    # default: Triton then loads the tile synchronously, and it lost on the H200).
    f16_tile = bool(
        cfg.pop("F16_TILE", False) and qk_fp8 and round_p and cfg["BLOCK_M"] < MMA_V3_MIN_ROWS
    )
    if f16_tile:
        qk_fp8 = False
    # Tiles converted before their dots are not pipelined by Triton: they can be prefetched
    # by hand (off by default: it lost on the H200, see DECODE_CONFIGS).
    reg_prefetch = bool(cfg.pop("REG_PREFETCH", False))

    def launch(cfg: dict[str, int]) -> None:
        grid = (num_programs,) if group_mode == 0 else (groups, num_programs)
        _persistent_mla_decode_kernel[grid](
            q,
            kv_cache,
            out,
            lse,
            partial_o,
            partial_lse,
            plan.work_indptr,
            plan.work_info_set.contiguous(),
            _index_tensor(kv_indptr, device),
            _index_tensor(kv_indices, device),
            _index_tensor(kv_last_page_lens, device),
            _index_tensor(qo_indptr, device),
            q_scale_t if q_scale_t is not None else plan.work_indptr,
            kv_scale_t if kv_scale_t is not None else plan.work_indptr,
            q_scale_v,
            kv_scale_v,
            float(sm_scale) * LOG2E,
            q.stride(0),
            q.stride(1),
            kv_cache.stride(0),
            kv_cache.stride(1),
            out.stride(0),
            out.stride(1),
            lse.stride(0),
            lse.stride(1),
            partial_o.stride(0),
            partial_o.stride(1),
            partial_lse.stride(0),
            partial_lse.stride(1),
            hpw,
            plan.fold_ratio,
            seq_q,
            PAGE_SIZE=page_size,
            CAUSAL=bool(causal),
            BLOCK_M=cfg["BLOCK_M"],
            BLOCK_N=cfg["BLOCK_N"],
            D_V=LATENT_DIM,
            D_R=ROPE_DIM,
            DOT_T=tl.float32 if interpreted() else tl.bfloat16,
            QK_FP8=qk_fp8,
            P_FP8=round_p,
            V_F16=v_f16,
            F16_TILE=f16_tile,
            REG_PREFETCH=reg_prefetch,
            SCALES_IN_MEMORY=scales_in_memory,
            GROUP_MODE=group_mode,
            ABLATE=cfg.get("ABLATE", 0),
            FAULT=fault,
            num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"],
        )

    num_programs = plan.work_indptr.numel() - 1
    if num_programs > 0 and plan.num_works > 0:
        key = (*sorted(cfg.items()), q.dtype, kv_cache.dtype, page_size, round_p)
        cfg["num_stages"] = min(cfg["num_stages"], _STAGE_LIMITS.get(key, cfg["num_stages"]))
        while True:
            try:
                launch(cfg)
                break
            except OutOfResources:
                if cfg["num_stages"] <= 1:
                    raise
                warnings.warn(
                    f"persistent_mla_decode: config {cfg} needs too much shared memory; "
                    f"using num_stages={cfg['num_stages'] - 1}",
                    stacklevel=2,
                )
                cfg = {**cfg, "num_stages": cfg["num_stages"] - 1}
                _STAGE_LIMITS[key] = cfg["num_stages"]
    mla_reduce(partial_o, partial_lse, plan, out, lse, _fault=_fault)
    return out, lse


def default_sm_scale() -> float:
    """DeepSeek's absorbed-MLA softmax scale, 1/sqrt(576)."""
    return 1.0 / math.sqrt(CACHE_DIM)
