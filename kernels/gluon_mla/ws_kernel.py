"""The warp-specialized MLA decode for Hopper in Gluon: a loader warpgroup and two consumer
warpgroups that take turns scoring KV tiles, so one's softmax runs under the other's MMAs.

The same arguments and contract as `kernels.gluon_mla.decode_kernel` (the plan's work loop,
row packing, paging, causal limits, partial and final rows), for 64 packed rows per block,
bf16 q and KV or e4m3 q and KV, ``STAGES >= 2`` KV buffers of ``BLOCK_N`` tokens. Launched
with 4 warps (consumer 0, the default partition) plus two worker partitions of 4 warps:
consumer 1 and the loader; `setmaxnreg` gives each consumer thread 232 registers, a loader
thread 40.

- The loader copies Q (once per block) and the KV tiles (``cp.async``, one page lookup per
  token, any page size) into shared memory, and signals each landed tile on an mbarrier.
- Consumer ``a`` owns the output columns ``[256 a, 256 a + 256)`` and the program's tiles
  ``g`` with ``g % 2 == a``. For its tile it computes ``S = Q Kᵀ`` (all 576 features), the
  softmax from the running row max the other consumer handed over, writes P (bf16,
  e4m3-rounded first with `P_FP8`) and the new max to shared memory, signals them, and
  multiplies its P by its half of V. For the other's tile it rescales by the handed-over
  max and multiplies the other's P by its half of V. It issues the score of its next tile
  before it waits for the other's P, so the tensor cores score one tile while the other
  consumer runs the softmax of the previous one; and its softmax waits for that score
  alone, so the other's ``P V`` on this half runs under it.
- Each consumer keeps the row sum of its own tiles; the two are added once at the end of a
  block (through shared memory) and each consumer stores its half of O (consumer 0 the LSE).

e4m3: the scores run on fp8 ``wgmma`` straight from the stage (Q and K are K-major); V is
not, so the loader widens each tile's latent block to fp16 into a ring of two V buffers of
its own before it signals the tile (`kernels.gluon_mla.ws_loader`), and ``P V`` runs on fp16
``wgmma`` with P (e4m3-rounded with `P_FP8`, exact in fp16) in a P buffer beside each V. The
tiles are handed over (`kv_ready`, `kv_free`) through that ring; an e4m3 stage, read by its
owner's scores alone, is freed as soon as they are done (`k_free`), so six stages of 32
tokens (18 KiB each) stream ahead beside the two V buffers (36 KiB each with P) and Q.

bf16 shared memory: Q 72 KiB, the KV stages (72 KiB each at 64 tokens, 36 KiB at 32), the
handed-over max and the row sums, the mbarriers (217.7 KiB at ``BLOCK_N`` 64 with two stages,
at 32 with four). P has no buffer of its own: once the owner's ``S = Q Kᵀ`` of a tile is
done, that tile's rope columns (``BLOCK_N x 64`` bf16, the bytes of a ``64 x BLOCK_N`` P)
are dead until the stage is released, so the owner writes P there and both consumers' ``P
V`` read it from shared memory: no register-A MMA, so ptxas does not serialise the
``wgmma``s. Every buffer's reuse is ordered by the mbarriers (`kv_ready`/`kv_free` per
stage, `q_ready`/`q_free`, `p_ready` per consumer, `l_ready` per block parity); every
waiter's phase is counted from the program's tiles and blocks so far.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

from kernels.gluon_mla.parts import BLOCK_M, block_bounds, cta_barrier, store_block
from kernels.gluon_mla.ws_loader import (
    LOADER_THREADS,
    LOADER_WARPS,
    V_STAGES,
    loader,
    tile_stage,
)
from kernels.plan_slice import program_slice, work_span

PART_WARPS = gl.constexpr(4)  # warps of each consumer partition (one warpgroup)
CONSUMER_REGS = gl.constexpr(232)  # registers a thread of consumer 1 (O half: 128)
LOADER_REGS = gl.constexpr(40)  # registers a loader thread


@gluon.jit
def _chunked_scores(q_lat, q_rope, lat_buf, rope_buf, S_L: gl.constexpr, BLOCK_N: gl.constexpr,
                    D_V: gl.constexpr):  # fmt: skip
    """Issue ``S = Q Kᵀ`` (asynchronous), the latent block as a loop over its 128-byte
    column chunks (64 bf16 or 128 e4m3 columns): each MMA's shared-memory descriptors are
    then built where it is issued (with the k-steps unrolled, as `parts.issue_scores`, the
    compiler holds all their descriptors across the kernel and spills). A 128-byte-swizzled
    ``[rows, 512]`` buffer is ``[rows, 128 bytes]`` ones back to back, so the chunks
    reinterpret the same memory."""
    KV_T: gl.constexpr = lat_buf.dtype
    CHUNK_COLS: gl.constexpr = 1024 // KV_T.primitive_bitwidth
    Q_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, CHUNK_COLS], KV_T)
    K_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, CHUNK_COLS], KV_T)
    q_chunks = q_lat._reinterpret(KV_T, [D_V // CHUNK_COLS, BLOCK_M, CHUNK_COLS], Q_SL)
    k_chunks = lat_buf._reinterpret(KV_T, [D_V // CHUNK_COLS, BLOCK_N, CHUNK_COLS], K_SL)
    s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_L)
    s = warpgroup_mma(q_rope, rope_buf.permute((1, 0)), s, use_acc=False, is_async=True)
    for c in range(D_V // CHUNK_COLS):
        s = warpgroup_mma(q_chunks.index(c), k_chunks.index(c).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _p_tile(p_ring, g, R: gl.constexpr, BLOCK_N: gl.constexpr):
    """Tile `g`'s P (``[BLOCK_M, BLOCK_N]``, V's element type) in `p_ring` (`R` slots): the
    rope blocks of the bf16 stages, dead once the tile's owner scored it (bf16 P), or the
    e4m3 decode's own fp16 P buffers."""
    if p_ring.dtype == gl.bfloat16:
        P_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], gl.bfloat16)
        p_buf = p_ring.index(g % R)._reinterpret(gl.bfloat16, [BLOCK_M, BLOCK_N], P_SL)
    else:
        p_buf = p_ring.index(g % R)
    return p_buf


@gluon.jit
def _landed(bar, phase):
    """Wait until the loader's copies signalled on `bar` landed; then fence, so this
    partition's ``wgmma`` (the async proxy) reads what ``cp.async`` wrote."""
    mbarrier.wait(bar, phase)
    fence_async_shared()


@gluon.jit
def _release(bar):
    """This partition's arrival on `bar`, once all its warps got there."""
    cta_barrier()
    mbarrier.arrive(bar)


@gluon.jit
def _others_pv(
    o, m_i, l_i, v_buf, p_ring, m_smem, p_ready, g, WG: gl.constexpr, R: gl.constexpr,
    BLOCK_N: gl.constexpr, HALF: gl.constexpr, S_ROW: gl.constexpr, O_ROW: gl.constexpr,
):  # fmt: skip
    """The other consumer's tile `g` (the program's) on this half: once it handed over P and
    the max through that tile, rescale O and ΣP to that max and issue ``P V`` (async)."""
    mbarrier.wait(p_ready.index(g % 2), (g // 2) & 1)
    m_new = m_smem.load(S_ROW)
    alpha = gl.exp2(m_i - gl.where(m_new == float("-inf"), 0.0, m_new))
    o = o * gl.convert_layout(alpha, O_ROW)[:, None]
    v_half = v_buf.index(g % R).slice(WG * HALF, HALF, dim=1)
    p_buf = _p_tile(p_ring, g, R, BLOCK_N)
    return warpgroup_mma(p_buf, v_half, o, is_async=True), m_new, l_i * alpha


@gluon.jit
def _consumer(
    WG: gl.constexpr, buffers, pointers, stride_o_tok, stride_o_head, stride_lse_tok,
    stride_lse_head, stride_po_row, stride_po_head, stride_pl_row, stride_pl_head,
    heads_per_work, fold_ratio, seq_q,
    PAGE_SIZE: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    D_V: gl.constexpr, P_FP8: gl.constexpr, SCALES_IN_MEMORY: gl.constexpr,
    GROUP_MODE: gl.constexpr, FAULT: gl.constexpr,
):  # fmt: skip
    """Consumer `WG` (0 or 1): the scores and softmax of the tiles it owns (the program's
    tiles g with ``g % 2 == WG``), and its half of ``P V`` for every tile. `buffers` and
    `pointers` are the kernel's tuples of that name."""
    (
        q_lat, q_rope, kv_lat, kv_rope, v_buf, p_ring, m_smem, l_smem, kv_ready, kv_free, k_free,
        q_ready, q_free, p_ready, l_ready,
    ) = buffers  # fmt: skip
    (
        out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, work_indptr_ptr, work_info_ptr, kv_indptr_ptr,
        kv_last_page_lens_ptr, qo_indptr_ptr, q_scale_ptr, kv_scale_ptr, q_scale_value,
        kv_scale_value, sm_scale_log2,
    ) = pointers  # fmt: skip
    HALF: gl.constexpr = D_V // 2
    E4M3: gl.constexpr = kv_lat.dtype == gl.float8e4nv
    if E4M3:
        R: gl.constexpr = V_STAGES  # tiles are handed over through the V ring
    else:
        R: gl.constexpr = STAGES  # through the KV stages
    QK_K: gl.constexpr = 256 // kv_lat.dtype.primitive_bitwidth  # a wgmma k-step: 32 bytes
    S_L: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[PART_WARPS, 1], instr_shape=[16, BLOCK_N, QK_K]
    )
    O_L: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[PART_WARPS, 1], instr_shape=[16, HALF, 16]
    )
    S_ROW: gl.constexpr = gl.SliceLayout(1, S_L)
    O_ROW: gl.constexpr = gl.SliceLayout(1, O_L)

    grp, work_begin, work_end, kv_scale, score_scale = program_slice(
        work_indptr_ptr, work_info_ptr, fold_ratio, seq_q, q_scale_ptr, kv_scale_ptr,
        q_scale_value, kv_scale_value, sm_scale_log2, SCALES_IN_MEMORY, GROUP_MODE, FAULT,
    )  # fmt: skip
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_L))
    g = 0  # tiles of the blocks before this one
    blk = 0
    for w in range(work_begin, work_end):
        (
            partial_loc, qo_start, group, part_head, q_begin, q_len, _, _, kv_len, tok_lo, tok_hi,
            num_rows,
        ) = work_span(
            work_info_ptr, w, qo_indptr_ptr, kv_indptr_ptr, kv_last_page_lens_ptr,
            heads_per_work, fold_ratio, grp, PAGE_SIZE, GROUP_MODE, FAULT,
        )  # fmt: skip
        for m0 in range(0, num_rows, BLOCK_M):
            row_hi, _, num_tiles = block_bounds(
                m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, q_begin,
                q_len, kv_len, tok_lo, tok_hi, CAUSAL, BLOCK_N, S_ROW,
            )  # fmt: skip
            m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, S_ROW)  # max through tile j
            l_i = gl.zeros([BLOCK_M], gl.float32, S_ROW)  # ΣP of this consumer's tiles
            o = warpgroup_mma_init(gl.zeros([BLOCK_M, HALF], gl.float32, O_L))  # in flight
            _landed(q_ready, blk & 1)
            for t in range((WG + g) % 2, num_tiles, 2):
                # The other's tile t - 1 (if any): release tile t - 2 (own, its P V done),
                # issue S_t, then (once the other handed over P) P V_{t-1} on this half; wait
                # for S_t alone, P V_{t-1} (issued after it) running on under the softmax.
                stage = (g + t) % STAGES  # its K
                ring, phase = tile_stage(g + t, R)  # its hand-over, V and P
                if t > 0:
                    o_now = warpgroup_mma_wait(0, deps=(o,))
                    if t > 1:
                        _release(kv_free.index((g + t - 2) % R))
                    _landed(kv_ready.index(ring), phase)
                    s = _chunked_scores(q_lat, q_rope, kv_lat.index(stage), kv_rope.index(stage),
                                        S_L, BLOCK_N, D_V)  # fmt: skip
                    o, m_i, l_i = _others_pv(
                        o_now, m_i, l_i, v_buf, p_ring, m_smem, p_ready, g + t - 1, WG, R,
                        BLOCK_N, HALF, S_ROW, O_ROW,
                    )  # fmt: skip
                    s_now = warpgroup_mma_wait(1, deps=(s,))
                else:
                    _landed(kv_ready.index(ring), phase)
                    s = _chunked_scores(q_lat, q_rope, kv_lat.index(stage), kv_rope.index(stage),
                                        S_L, BLOCK_N, D_V)  # fmt: skip
                    s_now = warpgroup_mma_wait(0, deps=(s,))
                if E4M3:
                    _release(k_free.index(stage))  # its K is scored: the loader may refill it
                # Own tile t: the softmax, P and the max handed over; then, P V_{t-1} done
                # (release tile t - 1), O rescaled and P V_t issued on this half.
                scores = s_now * score_scale
                pos = tok_lo + t * BLOCK_N + s_cols
                scores = gl.where(pos[None, :] < row_hi[:, None], scores, float("-inf"))
                m_new = gl.maximum(m_i, gl.max(scores, axis=1))
                m_ref = gl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = gl.exp2(m_i - m_ref)
                p = gl.exp2(scores - m_ref[:, None])
                p_buf = _p_tile(p_ring, g + t, R, BLOCK_N)
                if P_FP8:
                    p16 = p.to(gl.float8e4nv).to(p_buf.dtype)
                else:
                    p16 = p.to(p_buf.dtype)
                l_i = l_i * alpha + gl.sum(p, axis=1)  # ΣP unrounded, as the Gluon decode
                m_i = m_new
                p_buf.store(p16)
                m_smem.store(m_new)
                fence_async_shared()
                _release(p_ready.index(WG))
                o_now = warpgroup_mma_wait(0, deps=(o,))
                if t > 0:
                    _release(kv_free.index((g + t - 1) % R))
                o_now = o_now * gl.convert_layout(alpha, O_ROW)[:, None]
                v_half = v_buf.index(ring).slice(WG * HALF, HALF, dim=1)
                o = warpgroup_mma(p_buf, v_half, o_now, is_async=True)
            # The block's last tile: the other's (its P V here), or own (P V_last in flight).
            last = num_tiles - 1
            o_now = warpgroup_mma_wait(0, deps=(o,))
            if last >= 0:
                if (g + last) % 2 != WG:
                    if last > 0:
                        _release(kv_free.index((g + last - 1) % R))
                    o, m_i, l_i = _others_pv(
                        o_now, m_i, l_i, v_buf, p_ring, m_smem, p_ready, g + last, WG, R,
                        BLOCK_N, HALF, S_ROW, O_ROW,
                    )  # fmt: skip
                    o_now = warpgroup_mma_wait(0, deps=(o,))
                _release(kv_free.index((g + last) % R))
            _release(q_free)
            # The two row sums, added: each consumer's through shared memory.
            l_smem.index((blk % 2) * 2 + WG).store(l_i)
            _release(l_ready.index(blk % 2))
            mbarrier.wait(l_ready.index(blk % 2), (blk // 2) & 1)
            l_tot = l_i + l_smem.index((blk % 2) * 2 + 1 - WG).load(S_ROW)
            store_block(  # this consumer's columns; consumer 0 the LSE
                o_now, m_i, l_tot[:, None], kv_scale, m0, num_rows, qo_start, heads_per_work,
                fold_ratio, seq_q, group, partial_loc, part_head, out_ptr + WG * HALF, lse_ptr,
                part_o_ptr + WG * HALF, part_lse_ptr, stride_o_tok, stride_o_head,
                stride_lse_tok, stride_lse_head, stride_po_row, stride_po_head, stride_pl_row,
                stride_pl_head, HALF, O_L, WG == 0,
            )  # fmt: skip
            g += num_tiles
            blk += 1


@gluon.jit
def gluon_mla_ws_decode_kernel(
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
    gl.static_assert(STAGES >= 2, "the warp-specialized decode needs two KV stages or more")
    gl.static_assert(gl.num_warps() == PART_WARPS, "launch it with num_warps=4")
    KV_T: gl.constexpr = kv_ptr.dtype.element_ty  # q's too (`kernels.gluon_mla.ws_usable`)
    Q_LAT_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_V], KV_T)
    Q_ROPE_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_R], KV_T)
    KV_LAT_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], KV_T)
    KV_ROPE_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_R], KV_T)
    FLAT: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])  # rows of floats
    BAR: gl.constexpr = mbarrier.MBarrierLayout()

    q_lat = gl.allocate_shared_memory(KV_T, [BLOCK_M, D_V], Q_LAT_SL)
    q_rope = gl.allocate_shared_memory(KV_T, [BLOCK_M, D_R], Q_ROPE_SL)
    kv_lat = gl.allocate_shared_memory(KV_T, [STAGES, BLOCK_N, D_V], KV_LAT_SL)
    kv_rope = gl.allocate_shared_memory(KV_T, [STAGES, BLOCK_N, D_R], KV_ROPE_SL)
    if KV_T == gl.float8e4nv:
        # V widened to fp16 by the loader (e4m3 and e4m3-rounded P are exact in it) into a
        # ring of its own, P beside it; the e4m3 stages hold K for the owner's scores only.
        V_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], gl.float16)
        P_SL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], gl.float16)
        v_buf = gl.allocate_shared_memory(gl.float16, [V_STAGES, BLOCK_N, D_V], V_SL)
        p_ring = gl.allocate_shared_memory(gl.float16, [V_STAGES, BLOCK_M, BLOCK_N], P_SL)
        kv_ready = gl.allocate_shared_memory(gl.int64, [V_STAGES, 1], BAR)
        kv_free = gl.allocate_shared_memory(gl.int64, [V_STAGES, 1], BAR)
        k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], BAR)
        for i in gl.static_range(V_STAGES):
            mbarrier.init(kv_ready.index(i), count=1)  # the loader, once it widened the tile
            mbarrier.init(kv_free.index(i), count=2)  # both consumers
        for i in gl.static_range(STAGES):
            mbarrier.init(k_free.index(i), count=1)  # the tile's owner, once it scored it
    else:
        gl.static_assert(BLOCK_M * BLOCK_N == BLOCK_N * D_R, "P takes a tile's rope buffer")
        v_buf = kv_lat  # V is the latent block as it is
        p_ring = kv_rope  # P over a tile's rope block
        kv_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], BAR)
        kv_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], BAR)
        k_free = kv_free  # a stage is freed by both consumers at once
        for i in gl.static_range(STAGES):
            mbarrier.init(kv_ready.index(i), count=LOADER_THREADS)  # each thread's copies landed
            mbarrier.init(kv_free.index(i), count=2)  # both consumers
    m_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M], FLAT)
    l_smem = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M], FLAT)  # [2 block parity + WG]
    p_ready = gl.allocate_shared_memory(gl.int64, [2, 1], BAR)
    l_ready = gl.allocate_shared_memory(gl.int64, [2, 1], BAR)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], BAR)
    q_free = gl.allocate_shared_memory(gl.int64, [1], BAR)
    for i in gl.static_range(2):
        mbarrier.init(p_ready.index(i), count=1)
        mbarrier.init(l_ready.index(i), count=2)
    mbarrier.init(q_ready, count=LOADER_THREADS)
    mbarrier.init(q_free, count=2)
    fence_async_shared()
    cta_barrier()

    # Gluon's `warp_specialize` as of Triton 3.6: (fn, args) pairs, the default partition's
    # first; worker warps and registers. Both consumers take the shared memory and mbarriers
    # (`buffers`) and the pointers and float scales (`pointers`) as tuples; the integers and
    # constexprs are written out in each call: a tuple held in a variable would turn its
    # constexprs into tensors (and Triton makes an integer argument of 1 a constexpr).
    buffers = (
        q_lat, q_rope, kv_lat, kv_rope, v_buf, p_ring, m_smem, l_smem, kv_ready, kv_free, k_free,
        q_ready, q_free, p_ready, l_ready,
    )  # fmt: skip
    pointers = (
        out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, work_indptr_ptr, work_info_ptr, kv_indptr_ptr,
        kv_last_page_lens_ptr, qo_indptr_ptr, q_scale_ptr, kv_scale_ptr, q_scale_value,
        kv_scale_value, sm_scale_log2,
    )  # fmt: skip
    gl.warp_specialize(
        [
            (_consumer, (
                0, buffers, pointers, stride_o_tok, stride_o_head, stride_lse_tok,
                stride_lse_head, stride_po_row, stride_po_head, stride_pl_row, stride_pl_head,
                heads_per_work, fold_ratio, seq_q, PAGE_SIZE, CAUSAL, BLOCK_N, STAGES, D_V, P_FP8,
                SCALES_IN_MEMORY, GROUP_MODE, FAULT,
            )),
            (_consumer, (
                1, buffers, pointers, stride_o_tok, stride_o_head, stride_lse_tok,
                stride_lse_head, stride_po_row, stride_po_head, stride_pl_row, stride_pl_head,
                heads_per_work, fold_ratio, seq_q, PAGE_SIZE, CAUSAL, BLOCK_N, STAGES, D_V, P_FP8,
                SCALES_IN_MEMORY, GROUP_MODE, FAULT,
            )),
            (loader, (
                q_lat, q_rope, kv_lat, kv_rope, v_buf, kv_ready, kv_free, k_free, q_ready, q_free,
                q_ptr, kv_ptr, work_indptr_ptr, work_info_ptr, kv_indptr_ptr, kv_indices_ptr,
                kv_last_page_lens_ptr, qo_indptr_ptr, stride_q_tok, stride_q_head,
                stride_kv_block, stride_kv_slot, heads_per_work, fold_ratio, seq_q, PAGE_SIZE,
                CAUSAL, BLOCK_N, STAGES, D_V, D_R, GROUP_MODE, FAULT,
            )),
        ],
        [PART_WARPS, LOADER_WARPS],
        [CONSUMER_REGS, LOADER_REGS],
    )  # fmt: skip
