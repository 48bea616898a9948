"""The persistent MLA decode for Hopper in Gluon: wgmma, cp.async stages, split warpgroups.

The same contract as `kernels.triton_mla.decode_kernel` (one program per plan slice, the
work loop, row packing, paging, causal limits, partial and final rows), for 64 packed rows
per block of bf16 q over a bf16 cache, or of e4m3 (``float8_e4m3fn``) q over an e4m3 cache
(fewer rows are padded to one block): the cache's element type picks the operands when the
kernel compiles. Its layout, which plain Triton does not let one choose:

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

An e4m3 cache (per-tensor scales folded into the score scale and applied to O once, as for
bf16): Hopper's fp8 ``wgmma`` needs both operands K-major, which Q and the cached K rows are
but V (the same rows, read along the tokens) is not, so:

- ``S = Q Kᵀ`` multiplies the e4m3 Q and the e4m3 tile as they are (fp8 ``wgmma`` into an
  fp32 accumulator, whose additions keep about 14 bits: the conformance error model's fp8
  MMA term), straight from the stages ``cp.async`` fills: half the bytes of the bf16
  stages, so three stages fit (two tiles in flight) where bf16 has two.
- V is widened in shared memory: each tile's latent block is read from its stage into
  registers, 16 tokens at a time, and written to one V buffer in fp16 when P is rounded to
  e4m3 (both exact in fp16, one conversion per two values) or bf16 otherwise (exact too);
  ``P V`` then runs on 16-bit ``wgmma`` as for bf16. The widening of tile j + 1 runs while
  the tensor cores compute its scores, once ``P V`` of tile j has released the buffer.

Shared memory of an e4m3 cache at 64 tokens a tile: Q 36 KiB, three stages 108 KiB, V 64 KiB,
P 8 KiB. The widening is not hidden behind the tensor cores: timed without it (results wrong),
the e4m3 decode takes 25–30 % less time on an H200 (Triton 3.6).
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
    BLOCK_M,
    block_start,
    cta_barrier,
    issue_scores,
    issue_tile,
    slot_offsets,
    softmax_step,
    store_block,
    widen_v,
)
from kernels.plan_slice import program_slice, work_span


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
    KV_T: gl.constexpr = kv_ptr.dtype.element_ty  # q's too (`kernels.gluon_mla.usable`)
    E4M3: gl.constexpr = KV_T == gl.float8e4nv
    if E4M3:
        gl.static_assert(BLOCK_N == 64, "the e4m3 Gluon decode takes 64-token tiles")
        gl.static_assert(STAGES >= 2, "the e4m3 Gluon decode needs two stages or more")
        # LOAD: 16-byte cp.async vectors (16 e4m3 values), 8 rows x 64 columns a warp; the
        # scores on fp8 wgmma (k-steps of 32); P and the widened V in fp16 where P is
        # e4m3-rounded, else bf16.
        LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [8, 1], [1, 0])
        QK_K: gl.constexpr = 32
        P_T: gl.constexpr = gl.float16 if P_FP8 else gl.bfloat16
    else:
        # LOAD: 16-byte cp.async vectors (8 bf16 values), 4 rows x 64 columns a warp.
        LOAD: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
        QK_K: gl.constexpr = 16
        P_T: gl.constexpr = gl.bfloat16
    # S and O accumulators split over the two warpgroups by columns.
    S_L: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, BLOCK_N // 2, QK_K]
    )
    O_L: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, D_V // 2, 16]
    )
    LOAD_ROW: gl.constexpr = gl.SliceLayout(1, LOAD)
    S_ROW: gl.constexpr = gl.SliceLayout(1, S_L)
    O_ROW: gl.constexpr = gl.SliceLayout(1, O_L)
    Q_LAT_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_V], KV_T)
    Q_ROPE_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_R], KV_T)
    KV_LAT_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], KV_T)
    KV_ROPE_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_R], KV_T)
    P_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], P_T)

    q_lat = gl.allocate_shared_memory(KV_T, [BLOCK_M, D_V], Q_LAT_SL)
    q_rope = gl.allocate_shared_memory(KV_T, [BLOCK_M, D_R], Q_ROPE_SL)
    kv_lat = gl.allocate_shared_memory(KV_T, [STAGES, BLOCK_N, D_V], KV_LAT_SL)
    kv_rope = gl.allocate_shared_memory(KV_T, [STAGES, BLOCK_N, D_R], KV_ROPE_SL)
    if E4M3:
        V_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], P_T)
        v_buf = gl.allocate_shared_memory(P_T, [BLOCK_N, D_V], V_SL)  # tile j's V, widened
    p_smem = gl.allocate_shared_memory(P_T, [BLOCK_M, BLOCK_N], P_SL)

    grp, work_begin, work_end, kv_scale, score_scale = program_slice(
        work_indptr_ptr, work_info_ptr, fold_ratio, seq_q, q_scale_ptr, kv_scale_ptr,
        q_scale_value, kv_scale_value, sm_scale_log2, SCALES_IN_MEMORY, GROUP_MODE, FAULT,
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
            row_hi, block_hi, num_tiles, next_slot, next_ok = block_start(
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
            cta_barrier()
            s = issue_scores(q_lat, q_rope, kv_lat.index(0), kv_rope.index(0), S_L, BLOCK_N)
            if E4M3:
                widen_v(kv_lat.index(0), v_buf, BLOCK_N, D_V, P_T, 8)  # beside the scores
            s = warpgroup_mma_wait(0, deps=(s,))
            for j in range(num_tiles):
                # Every warpgroup is done with tile j - 1's stage (its scores, and its P V or,
                # for e4m3, its widening): the stage takes tile j + STAGES - 1.
                refill = (j + STAGES - 1) % STAGES
                issue_tile(
                    kv_ptr, next_slot, next_ok, kv_lat.index(refill), kv_rope.index(refill),
                    D_V, D_R, LOAD,
                )  # fmt: skip
                next_slot, next_ok = slot_offsets(
                    kv_indices_ptr, page_begin, tok_lo + (j + STAGES) * BLOCK_N, block_hi,
                    stride_kv_block, stride_kv_slot, BLOCK_N, PAGE_SIZE, LOAD_ROW,
                )  # fmt: skip

                pos = tok_lo + j * BLOCK_N + s_cols
                p, alpha, m_i, l_cols = softmax_step(s, m_i, l_cols, score_scale, pos, row_hi)
                if P_FP8:
                    p_smem.store(p.to(gl.float8e4nv).to(P_T))
                else:
                    p_smem.store(p.to(P_T))
                o = o * gl.convert_layout(alpha, O_ROW)[:, None]
                fence_async_shared()
                cta_barrier()  # both halves of P (and, for e4m3, all of tile j's V) are written
                if E4M3:
                    v = v_buf
                else:
                    v = kv_lat.index(j % STAGES)
                o = warpgroup_mma(p_smem, v, o, is_async=True)

                async_copy.wait_group(STAGES - 2)  # tile j + 1 landed
                fence_async_shared()
                cta_barrier()
                nxt = (j + 1) % STAGES
                s = issue_scores(q_lat, q_rope, kv_lat.index(nxt), kv_rope.index(nxt), S_L, BLOCK_N)
                if E4M3:
                    o = warpgroup_mma_wait(1, deps=(o,))  # P V done, the scores still running
                    cta_barrier()  # every warpgroup is done with P and V
                    widen_v(kv_lat.index(nxt), v_buf, BLOCK_N, D_V, P_T, 8)
                    s = warpgroup_mma_wait(0, deps=(s,))
                else:
                    o, s = warpgroup_mma_wait(0, deps=(o, s))
                    cta_barrier()  # every warpgroup is done with P and with tile j
            async_copy.wait_group(0)  # the look-ahead tiles past the end
            cta_barrier()
            store_block(
                o, m_i, l_cols, kv_scale, m0, num_rows, qo_start, heads_per_work, fold_ratio,
                seq_q, group, partial_loc, part_head, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
                stride_o_tok, stride_o_head, stride_lse_tok, stride_lse_head, stride_po_row,
                stride_po_head, stride_pl_row, stride_pl_head, D_V, O_L,
            )  # fmt: skip
