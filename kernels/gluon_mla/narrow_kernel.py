"""The persistent MLA decode for Hopper in Gluon for narrow blocks: tokens on the MMA rows.

The same contract as `kernels.gluon_mla.decode_kernel`, for e4m3 (``float8_e4m3fn``) q and
KV in blocks of ``ROWS`` (16 or 32) packed rows, with both products transposed so that no
MMA row is padding (the two-warpgroup decode pads such a block to 64 rows and computes four
or two times its products):

- ``Sᵀ = K Qᵀ``: the tile's 64 tokens are the 64 rows of fp8 ``wgmma`` and the block's rows
  its N. Both operands are K-major as cached (the tile's rows, Q's rows), so the e4m3 values
  are multiplied as they are, into an fp32 accumulator (the error model's fp8 MMA term).
- The online softmax runs down the columns of ``Sᵀ`` (a row's scores are one column).
- ``Oᵀ = Vᵀ Pᵀ``: the 512 latent columns are the MMA rows. V is widened in shared memory to
  fp16 (P e4m3-rounded: both exact) or bf16 (exact too) as in the two-warpgroup decode, and
  multiplied as a transposed 16-bit operand; P goes to shared memory K-major.

``WARPGROUPS`` (1 or 2, of 4 warps): two split ``Sᵀ`` by the block's rows and ``Oᵀ`` by the
latent columns (``Oᵀ`` is 512 × ROWS fp32: 64 or 128 registers a thread for one warpgroup at
16 or 32 rows, half that for two). KV tiles stream through ``STAGES`` shared buffers with
``cp.async`` (``STAGES - 1`` tiles in flight); a tile's widening runs beside its scores, once
the ``P V`` before it has released the buffer. Shared memory at 16 rows: Q 9 KiB, three stages
108 KiB, V 64 KiB, P 2 KiB, and 32 KiB where O is turned back to rows for the store.
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

from kernels.gluon_mla.parts import (
    block_start,
    cta_barrier,
    issue_tile,
    slot_offsets,
    store_block,
    widen_v,
)
from kernels.plan_slice import program_slice, work_span


@gluon.jit
def _scores_t(kv_lat, kv_rope, q_lat, q_rope, S_L: gl.constexpr, BLOCK_N: gl.constexpr,
              ROWS: gl.constexpr):  # fmt: skip
    """Issue ``Sᵀ = K Qᵀ`` over the latent and rope blocks of a stage (asynchronous)."""
    s = gl.zeros([BLOCK_N, ROWS], gl.float32, S_L)
    s = warpgroup_mma(kv_lat, q_lat.permute((1, 0)), s, use_acc=False, is_async=True)
    return warpgroup_mma(kv_rope, q_rope.permute((1, 0)), s, is_async=True)


@gluon.jit
def _softmax_t(s, m_i, l_t, score_scale, pos, row_hi):
    """`parts.softmax_step` down the columns of ``Sᵀ``: (Pᵀ, O's rescale, max, ΣP)."""
    scores = s * score_scale
    visible = pos[:, None] < row_hi[None, :]
    scores = gl.where(visible, scores, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(scores, axis=0))
    m_ref = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_ref)
    p = gl.exp2(scores - m_ref[None, :])
    return p, alpha, m_new, l_t * alpha[None, :] + p


@gluon.jit
def gluon_mla_narrow_decode_kernel(
    q_ptr, kv_ptr, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
    work_indptr_ptr, work_info_ptr, kv_indptr_ptr, kv_indices_ptr, kv_last_page_lens_ptr,
    qo_indptr_ptr, q_scale_ptr, kv_scale_ptr, q_scale_value, kv_scale_value, sm_scale_log2,
    stride_q_tok, stride_q_head, stride_kv_block, stride_kv_slot, stride_o_tok, stride_o_head,
    stride_lse_tok, stride_lse_head, stride_po_row, stride_po_head, stride_pl_row,
    stride_pl_head, heads_per_work, fold_ratio, seq_q,
    PAGE_SIZE: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    D_V: gl.constexpr, D_R: gl.constexpr, P_FP8: gl.constexpr, SCALES_IN_MEMORY: gl.constexpr,
    GROUP_MODE: gl.constexpr, FAULT: gl.constexpr, ROWS: gl.constexpr, WARPGROUPS: gl.constexpr,
):  # fmt: skip
    KV_T: gl.constexpr = kv_ptr.dtype.element_ty
    gl.static_assert(KV_T == gl.float8e4nv, "the narrow Gluon decode takes e4m3 q and KV")
    gl.static_assert(BLOCK_N == 64, "one tile is the 64 rows of a wgmma")
    gl.static_assert(STAGES >= 2, "the narrow Gluon decode needs two stages or more")
    P_T: gl.constexpr = gl.float16 if P_FP8 else gl.bfloat16
    WARPS: gl.constexpr = 4 * WARPGROUPS
    # 16-byte cp.async vectors (16 e4m3 values), 8 rows x 64 columns a warp
    LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [WARPS, 1], [1, 0])
    # Sᵀ: the warpgroups split the block's rows; Oᵀ: they split the latent columns
    S_L: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, WARPGROUPS], instr_shape=[16, ROWS // WARPGROUPS, 32]
    )
    O_L: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, ROWS, 16]
    )
    OUT_L: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [WARPS, 1], [1, 0])  # O, [ROWS, D_V]
    LOAD_ROW: gl.constexpr = gl.SliceLayout(1, LOAD)
    ROW_T: gl.constexpr = gl.SliceLayout(0, S_L)  # one value per block row
    Q_LAT_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D_V], KV_T)
    Q_ROPE_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D_R], KV_T)
    KV_LAT_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], KV_T)
    KV_ROPE_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_R], KV_T)
    V_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], P_T)
    P_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_N], P_T)

    q_lat = gl.allocate_shared_memory(KV_T, [ROWS, D_V], Q_LAT_SL)
    q_rope = gl.allocate_shared_memory(KV_T, [ROWS, D_R], Q_ROPE_SL)
    kv_lat = gl.allocate_shared_memory(KV_T, [STAGES, BLOCK_N, D_V], KV_LAT_SL)
    kv_rope = gl.allocate_shared_memory(KV_T, [STAGES, BLOCK_N, D_R], KV_ROPE_SL)
    v_buf = gl.allocate_shared_memory(P_T, [BLOCK_N, D_V], V_SL)  # tile j's V, widened
    p_smem = gl.allocate_shared_memory(P_T, [ROWS, BLOCK_N], P_SL)  # P, K-major for Pᵀ

    grp, work_begin, work_end, kv_scale, score_scale = program_slice(
        work_indptr_ptr, work_info_ptr, fold_ratio, seq_q, q_scale_ptr, kv_scale_ptr,
        q_scale_value, kv_scale_value, sm_scale_log2, SCALES_IN_MEMORY, GROUP_MODE, FAULT,
    )  # fmt: skip
    s_toks = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, S_L))

    for w in range(work_begin, work_end):
        (
            partial_loc, qo_start, group, part_head, q_begin, q_len, page_begin, _pages, kv_len,
            tok_lo, tok_hi, num_rows,
        ) = work_span(
            work_info_ptr, w, qo_indptr_ptr, kv_indptr_ptr, kv_last_page_lens_ptr,
            heads_per_work, fold_ratio, grp, PAGE_SIZE, GROUP_MODE, FAULT,
        )  # fmt: skip

        for m0 in range(0, num_rows, ROWS):
            row_hi, block_hi, num_tiles, next_slot, next_ok = block_start(
                q_ptr, kv_ptr, kv_indices_ptr, q_lat, q_rope, kv_lat, kv_rope,
                m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group,
                q_begin, q_len, kv_len, page_begin, tok_lo, tok_hi,
                stride_q_tok, stride_q_head, stride_kv_block, stride_kv_slot,
                PAGE_SIZE, CAUSAL, BLOCK_N, STAGES, D_V, D_R, LOAD, ROW_T, ROWS,
            )  # fmt: skip

            m_i = gl.full([ROWS], float("-inf"), gl.float32, ROW_T)
            l_t = gl.zeros([BLOCK_N, ROWS], gl.float32, S_L)  # ΣP per token slot and row
            o_t = gl.zeros([D_V, ROWS], gl.float32, O_L)

            async_copy.wait_group(STAGES - 2)  # Q and tile 0 landed (this thread's copies)
            fence_async_shared()
            cta_barrier()
            s = _scores_t(kv_lat.index(0), kv_rope.index(0), q_lat, q_rope, S_L, BLOCK_N, ROWS)
            widen_v(kv_lat.index(0), v_buf, BLOCK_N, D_V, P_T, WARPS)  # beside the scores
            s = warpgroup_mma_wait(0, deps=(s,))
            for j in range(num_tiles):
                # tile j - 1 is scored and widened: its stage takes tile j + STAGES - 1
                refill = (j + STAGES - 1) % STAGES
                issue_tile(
                    kv_ptr, next_slot, next_ok, kv_lat.index(refill), kv_rope.index(refill),
                    D_V, D_R, LOAD,
                )  # fmt: skip
                next_slot, next_ok = slot_offsets(
                    kv_indices_ptr, page_begin, tok_lo + (j + STAGES) * BLOCK_N, block_hi,
                    stride_kv_block, stride_kv_slot, BLOCK_N, PAGE_SIZE, LOAD_ROW,
                )  # fmt: skip

                pos = tok_lo + j * BLOCK_N + s_toks
                p, alpha, m_i, l_t = _softmax_t(s, m_i, l_t, score_scale, pos, row_hi)
                if P_FP8:
                    p = p.to(gl.float8e4nv).to(P_T)
                p_smem.store(gl.permute(p.to(P_T), (1, 0)))
                o_t = o_t * gl.convert_layout(alpha, gl.SliceLayout(0, O_L))[None, :]
                fence_async_shared()
                cta_barrier()  # P and tile j's widened V are written
                o_t = warpgroup_mma(v_buf.permute((1, 0)), p_smem.permute((1, 0)), o_t,
                                    is_async=True)  # fmt: skip

                async_copy.wait_group(STAGES - 2)  # tile j + 1 landed
                fence_async_shared()
                cta_barrier()
                nxt = (j + 1) % STAGES
                s = _scores_t(
                    kv_lat.index(nxt), kv_rope.index(nxt), q_lat, q_rope, S_L, BLOCK_N, ROWS
                )
                o_t = warpgroup_mma_wait(1, deps=(o_t,))  # P V done, the scores still running
                cta_barrier()  # every warp is done with P and V
                widen_v(kv_lat.index(nxt), v_buf, BLOCK_N, D_V, P_T, WARPS)
                s = warpgroup_mma_wait(0, deps=(s,))
            async_copy.wait_group(0)  # the look-ahead tiles past the end
            cta_barrier()
            o = gl.convert_layout(gl.permute(o_t, (1, 0)), OUT_L)
            store_block(
                o, m_i, gl.permute(l_t, (1, 0)), kv_scale, m0, num_rows, qo_start,
                heads_per_work, fold_ratio, seq_q, group, partial_loc, part_head, out_ptr,
                lse_ptr, part_o_ptr, part_lse_ptr, stride_o_tok, stride_o_head, stride_lse_tok,
                stride_lse_head, stride_po_row, stride_po_head, stride_pl_row, stride_pl_head,
                D_V, OUT_L, ROWS=ROWS,
            )  # fmt: skip
