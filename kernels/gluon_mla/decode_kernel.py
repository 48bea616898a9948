"""The persistent MLA decode for Hopper in Gluon: wgmma, cp.async stages, split warpgroups.

The same contract as `kernels.triton_mla.decode_kernel` (one program per plan slice, the
work loop, row packing, paging, causal limits, partial and final rows), for 64 packed rows
per block, bf16 q and bf16 KV. Its layout, which plain Triton does not let one choose:

- 8 warps, two warpgroups. Every accumulator has ``warps_per_cta = [4, 2]``: the score tile
  ``S = Q Kᵀ`` (64 × BLOCK_N) is split by *columns* (each warpgroup scores half the tokens
  of the tile over all 576 features) and the output ``O`` (64 × 512) too (each warpgroup owns
  256 of the latent columns). No product is computed twice.
- Q (64 × 576) stays in shared memory for the whole block; KV tiles stream through
  ``STAGES`` shared buffers with ``cp.async`` (any page size: one page lookup per token,
  looked up a tile ahead), ``STAGES - 1`` tiles in flight.
- The softmax row max crosses the warpgroups (the compiler exchanges it through shared
  memory); the row sum is kept per column and summed once at the end. P goes to shared
  memory in bf16 (e4m3-rounded first with `P_FP8`) and both warpgroups multiply all of it by
  their half of V. The next tile's scores are issued right behind ``P V``, so the tensor
  cores run the two back to back; the softmax between them is not overlapped (see
  benchmarks/results/ for what that costs).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from kernels.plan_slice import program_slice, work_span

BLOCK_M = gl.constexpr(64)
# Gluon is experimental and renames as it goes: Triton 3.6 has `thread_barrier` and
# `async_copy_global_to_shared`, 3.7 `barrier`, 3.9 `async_load` too (the arguments alike).
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
_cp_async = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.jit
def _rows(
    m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, LAYOUT: gl.constexpr,
    ROWS: gl.constexpr = BLOCK_M,
):  # fmt: skip
    """The packed rows ``m0 .. m0 + ROWS - 1`` in `LAYOUT`: (in range, virtual row, local
    head, token, head)."""
    rows = m0 + gl.arange(0, ROWS, layout=LAYOUT)
    row_ok = rows < num_rows
    vrow = qo_start + rows // heads_per_work
    head_local = rows % heads_per_work
    token = (vrow // (fold_ratio * seq_q)) * seq_q + vrow % seq_q
    head = group * heads_per_work + head_local
    return row_ok, vrow, head_local, token, head


@gluon.jit
def _row_limit(token, q_begin, q_len, kv_len, tok_hi, CAUSAL: gl.constexpr):
    """Tokens each row may see (exclusive end): the causal limit within the work's range."""
    if CAUSAL:
        hi = gl.minimum(kv_len - q_len + (token - q_begin) + 1, tok_hi)
    else:
        hi = gl.zeros_like(token) + tok_hi
    return hi


@gluon.jit
def _slot_offsets(
    kv_indices_ptr, page_begin, n0, tok_hi, stride_kv_block, stride_kv_slot,
    BLOCK_N: gl.constexpr, PAGE_SIZE: gl.constexpr, LAYOUT: gl.constexpr,
):  # fmt: skip
    """Element offsets of the tile's cache rows (tokens ``n0 ...``) and which tokens exist."""
    pos = n0 + gl.arange(0, BLOCK_N, layout=LAYOUT)
    ok = pos < tok_hi
    page = gl.load(kv_indices_ptr + page_begin + pos // PAGE_SIZE, mask=ok, other=0)
    slot = page.to(gl.int64) * stride_kv_block + (pos % PAGE_SIZE).to(gl.int64) * stride_kv_slot
    return slot, ok


@gluon.jit
def _issue_tile(kv_ptr, slot, ok, lat_buf, rope_buf, D_V: gl.constexpr, D_R: gl.constexpr,
                LOAD: gl.constexpr):  # fmt: skip
    """cp.async of one KV tile (latent and rope blocks) into its stage; missing tokens are 0."""
    cols_v = gl.arange(0, D_V, layout=gl.SliceLayout(0, LOAD))
    cols_r = gl.arange(0, D_R, layout=gl.SliceLayout(0, LOAD))
    base = kv_ptr + slot[:, None]
    _cp_async(lat_buf, base + cols_v[None, :], mask=ok[:, None])
    _cp_async(rope_buf, base + D_V + cols_r[None, :], mask=ok[:, None])
    async_copy.commit_group()


@gluon.jit
def _scores(q_lat, q_rope, lat_buf, rope_buf, S_LAYOUT: gl.constexpr, BLOCK_N: gl.constexpr):
    """Issue ``S = Q Kᵀ`` over the latent and rope blocks of a stage (asynchronous)."""
    s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    s = warpgroup_mma(q_lat, lat_buf.permute((1, 0)), s, use_acc=False, is_async=True)
    return warpgroup_mma(q_rope, rope_buf.permute((1, 0)), s, is_async=True)


@gluon.jit
def _softmax_step(s, m_i, l_cols, score_scale, pos, row_hi):
    """One tile of the online softmax: (P, the rescale of O, the new row max, ΣP per column).

    Scores of tokens at or past a row's limit are -inf; ΣP is kept per row and column and
    summed over the columns once at the end (`_store_block`).
    """
    scores = s * score_scale
    visible = pos[None, :] < row_hi[:, None]
    scores = gl.where(visible, scores, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(scores, axis=1))
    m_ref = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_ref)
    p = gl.exp2(scores - m_ref[:, None])
    return p, alpha, m_new, l_cols * alpha[:, None] + p


@gluon.jit
def _store_block(
    o, m_i, l_cols, kv_scale, m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group,
    partial_loc, part_head, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, stride_o_tok,
    stride_o_head, stride_lse_tok, stride_lse_head, stride_po_row, stride_po_head, stride_pl_row,
    stride_pl_head, D_V: gl.constexpr, O_L: gl.constexpr, WITH_LSE: gl.constexpr = True,
):  # fmt: skip
    """A block's rows, normalised (times kv_scale): final O and LSE, or a partial's. `D_V`
    columns from `out_ptr` / `part_o_ptr` on; the LSE too with `WITH_LSE`."""
    O_ROW: gl.constexpr = gl.SliceLayout(1, O_L)
    o_cols = gl.arange(0, D_V, layout=gl.SliceLayout(0, O_L))
    l_i = gl.sum(l_cols, axis=1)

    seen = gl.convert_layout(l_i, O_ROW) > 0.0
    l_o = gl.convert_layout(l_i, O_ROW)
    m_o = gl.convert_layout(m_i, O_ROW)
    inv_l = gl.where(seen, kv_scale / gl.where(seen, l_o, 1.0), 0.0)
    out_o = o * inv_l[:, None]
    lse = gl.where(
        seen, (m_o + gl.log2(gl.where(seen, l_o, 1.0))) / 1.4426950408889634, float("-inf")
    )
    o_ok, o_vrow, o_head_local, o_token, o_head = _rows(
        m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, O_ROW
    )
    if partial_loc < 0:
        o_row = o_token.to(gl.int64) * stride_o_tok + o_head.to(gl.int64) * stride_o_head
        gl.store(
            out_ptr + o_row[:, None] + o_cols[None, :],
            out_o.to(out_ptr.dtype.element_ty),
            mask=o_ok[:, None],
        )
        if WITH_LSE:
            l_off = o_token.to(gl.int64) * stride_lse_tok + o_head.to(gl.int64) * stride_lse_head
            gl.store(lse_ptr + l_off, lse, mask=o_ok)
    else:
        prow = (partial_loc + o_vrow - qo_start).to(gl.int64)
        phead = (part_head + o_head_local).to(gl.int64)
        po_row = prow * stride_po_row + phead * stride_po_head
        gl.store(part_o_ptr + po_row[:, None] + o_cols[None, :], out_o, mask=o_ok[:, None])
        if WITH_LSE:
            gl.store(part_lse_ptr + prow * stride_pl_row + phead * stride_pl_head, lse, mask=o_ok)


@gluon.jit
def _block_start(
    q_ptr, kv_ptr, kv_indices_ptr, q_lat, q_rope, kv_lat, kv_rope,
    m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group,
    q_begin, q_len, kv_len, page_begin, tok_lo, tok_hi,
    stride_q_tok, stride_q_head, stride_kv_block, stride_kv_slot,
    PAGE_SIZE: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    D_V: gl.constexpr, D_R: gl.constexpr, LOAD: gl.constexpr, S_ROW: gl.constexpr,
):  # fmt: skip
    """A block's start: Q and tiles 0 .. STAGES - 2 issued (``cp.async``, Q's group first).

    Returns each row's token limit (in `S_ROW`), the block's limit, its tile count, and the
    offsets and mask of tile STAGES - 1, the next to issue.
    """
    LOAD_ROW: gl.constexpr = gl.SliceLayout(1, LOAD)
    cols_v = gl.arange(0, D_V, layout=gl.SliceLayout(0, LOAD))
    cols_r = gl.arange(0, D_R, layout=gl.SliceLayout(0, LOAD))
    row_ok, _, _, token, head = _rows(
        m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, LOAD_ROW
    )
    q_row = token.to(gl.int64) * stride_q_tok + head.to(gl.int64) * stride_q_head
    q_base = q_ptr + q_row[:, None]
    _cp_async(q_lat, q_base + cols_v[None, :], mask=row_ok[:, None])
    _cp_async(q_rope, q_base + D_V + cols_r[None, :], mask=row_ok[:, None])
    async_copy.commit_group()
    row_hi_load = _row_limit(token, q_begin, q_len, kv_len, tok_hi, CAUSAL)
    block_hi = gl.max(gl.where(row_ok, row_hi_load, tok_lo), axis=0)
    num_tiles = gl.cdiv(gl.maximum(block_hi - tok_lo, 0), BLOCK_N)

    _, _, _, s_token, _ = _rows(
        m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, S_ROW
    )
    row_hi = _row_limit(s_token, q_begin, q_len, kv_len, tok_hi, CAUSAL)

    # Tiles 0 .. STAGES - 2 in flight (a tile past the end loads nothing).
    for t in gl.static_range(STAGES - 1):
        slot, ok = _slot_offsets(
            kv_indices_ptr, page_begin, tok_lo + t * BLOCK_N, block_hi,
            stride_kv_block, stride_kv_slot, BLOCK_N, PAGE_SIZE, LOAD_ROW,
        )  # fmt: skip
        _issue_tile(kv_ptr, slot, ok, kv_lat.index(t), kv_rope.index(t), D_V, D_R, LOAD)
    next_slot, next_ok = _slot_offsets(
        kv_indices_ptr, page_begin, tok_lo + (STAGES - 1) * BLOCK_N, block_hi,
        stride_kv_block, stride_kv_slot, BLOCK_N, PAGE_SIZE, LOAD_ROW,
    )  # fmt: skip
    return row_hi, block_hi, num_tiles, next_slot, next_ok


@gluon.jit
def gluon_mla_decode_kernel(
    q_ptr, kv_ptr, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
    work_indptr_ptr, work_info_ptr, kv_indptr_ptr, kv_indices_ptr, kv_last_page_lens_ptr,
    qo_indptr_ptr, q_scale_ptr, kv_scale_ptr, q_scale_value, kv_scale_value, sm_scale_log2,
    stride_q_tok, stride_q_head, stride_kv_block, stride_kv_slot, stride_o_tok, stride_o_head,
    stride_lse_tok, stride_lse_head, stride_po_row, stride_po_head, stride_pl_row,
    stride_pl_head, heads_per_work, fold_ratio, seq_q,
    PAGE_SIZE: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    D_V: gl.constexpr, D_R: gl.constexpr, P_FP8: gl.constexpr, SCALES_IN_MEMORY: gl.constexpr,
    GROUP_MODE: gl.constexpr, FAULT: gl.constexpr,
):  # fmt: skip
    # Layouts: LOAD for the cp.async pointers (16-byte vectors, 4 rows x 64 columns a warp);
    # S and O accumulators split over the two warpgroups by columns.
    LOAD: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
    S_L: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, BLOCK_N // 2, 16]
    )
    O_L: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, D_V // 2, 16]
    )
    LOAD_ROW: gl.constexpr = gl.SliceLayout(1, LOAD)
    S_ROW: gl.constexpr = gl.SliceLayout(1, S_L)
    O_ROW: gl.constexpr = gl.SliceLayout(1, O_L)
    Q_LAT_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_V], gl.bfloat16)
    Q_ROPE_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_R], gl.bfloat16)
    KV_LAT_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], gl.bfloat16)
    KV_ROPE_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_R], gl.bfloat16)
    P_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], gl.bfloat16)

    q_lat = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, D_V], Q_LAT_SL)
    q_rope = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, D_R], Q_ROPE_SL)
    kv_lat = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, D_V], KV_LAT_SL)
    kv_rope = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, D_R], KV_ROPE_SL)
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, BLOCK_N], P_SL)

    grp, work_begin, work_end, kv_scale, score_scale = program_slice(
        work_indptr_ptr, q_scale_ptr, kv_scale_ptr, q_scale_value, kv_scale_value,
        sm_scale_log2, SCALES_IN_MEMORY, GROUP_MODE, FAULT,
    )  # fmt: skip
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_L))

    for w in range(work_begin, work_end):
        (
            partial_loc, qo_start, group, part_head, q_begin, q_len, page_begin, _pages, kv_len,
            tok_lo, tok_hi, num_rows,
        ) = work_span(
            work_info_ptr, w, qo_indptr_ptr, kv_indptr_ptr, kv_last_page_lens_ptr,
            heads_per_work, fold_ratio, grp, PAGE_SIZE, GROUP_MODE, FAULT,
        )  # fmt: skip

        for m0 in range(0, num_rows, BLOCK_M):
            row_hi, block_hi, num_tiles, next_slot, next_ok = _block_start(
                q_ptr, kv_ptr, kv_indices_ptr, q_lat, q_rope, kv_lat, kv_rope,
                m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group,
                q_begin, q_len, kv_len, page_begin, tok_lo, tok_hi,
                stride_q_tok, stride_q_head, stride_kv_block, stride_kv_slot,
                PAGE_SIZE, CAUSAL, BLOCK_N, STAGES, D_V, D_R, LOAD, S_ROW,
            )  # fmt: skip

            m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, S_ROW)
            l_cols = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_L)  # ΣP per row and column
            o = gl.zeros([BLOCK_M, D_V], gl.float32, O_L)

            async_copy.wait_group(STAGES - 2)  # Q and tile 0 landed (this thread's copies)
            fence_async_shared()
            _cta_barrier()
            s = _scores(q_lat, q_rope, kv_lat.index(0), kv_rope.index(0), S_L, BLOCK_N)
            s = warpgroup_mma_wait(0, deps=(s,))
            for j in range(num_tiles):
                # Every warpgroup is done with tile j - 1: its stage takes tile j + STAGES - 1.
                refill = (j + STAGES - 1) % STAGES
                _issue_tile(
                    kv_ptr, next_slot, next_ok, kv_lat.index(refill), kv_rope.index(refill),
                    D_V, D_R, LOAD,
                )  # fmt: skip
                next_slot, next_ok = _slot_offsets(
                    kv_indices_ptr, page_begin, tok_lo + (j + STAGES) * BLOCK_N, block_hi,
                    stride_kv_block, stride_kv_slot, BLOCK_N, PAGE_SIZE, LOAD_ROW,
                )  # fmt: skip

                pos = tok_lo + j * BLOCK_N + s_cols
                p, alpha, m_i, l_cols = _softmax_step(s, m_i, l_cols, score_scale, pos, row_hi)
                if P_FP8:
                    p_smem.store(p.to(gl.float8e4nv).to(gl.bfloat16))
                else:
                    p_smem.store(p.to(gl.bfloat16))
                o = o * gl.convert_layout(alpha, O_ROW)[:, None]
                fence_async_shared()
                _cta_barrier()  # both halves of P are written
                stage = j % STAGES
                o = warpgroup_mma(p_smem, kv_lat.index(stage), o, is_async=True)

                async_copy.wait_group(STAGES - 2)  # tile j + 1 landed
                fence_async_shared()
                _cta_barrier()
                nxt = (j + 1) % STAGES
                s = _scores(q_lat, q_rope, kv_lat.index(nxt), kv_rope.index(nxt), S_L, BLOCK_N)
                o, s = warpgroup_mma_wait(0, deps=(o, s))
                _cta_barrier()  # every warpgroup is done with P and with tile j
            async_copy.wait_group(0)  # the look-ahead tiles past the end
            _cta_barrier()
            _store_block(
                o, m_i, l_cols, kv_scale, m0, num_rows, qo_start, heads_per_work, fold_ratio,
                seq_q, group, partial_loc, part_head, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
                stride_o_tok, stride_o_head, stride_lse_tok, stride_lse_head, stride_po_row,
                stride_po_head, stride_pl_row, stride_pl_head, D_V, O_L,
            )  # fmt: skip
