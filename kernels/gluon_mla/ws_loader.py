"""The loader partition of the warp-specialized decode (`kernels.gluon_mla.ws_kernel`): Q
and the KV tiles into shared memory with ``cp.async``, each tile signalled on an mbarrier
once it is ready; and the stage arithmetic it shares with the consumers (`tile_stage`).

A bf16 loader never waits for its own copies: each thread's ``cp.async.mbarrier.arrive``
(``noinc``) fires once that thread's copies landed, so `kv_ready` and `q_ready` count
`LOADER_THREADS` arrivals, and up to ``STAGES`` tiles are in flight. The copies land through
the generic proxy; a consumer fences (``fence.proxy.async``) after its wait, before its
``wgmma`` reads them.

An e4m3 loader also widens each tile's V (its latent block) to fp16, since Hopper's fp8
``wgmma`` takes no V (it is not K-major), into a ring of `V_STAGES` buffers of its own: it
issues tile j's copies into the e4m3 stage the tile's owner freed once it scored tile
j - STAGES (`k_free`), waits for tile j - (STAGES - 2)'s copies (``wait_group``) and for
both consumers to release that tile's V buffer (`kv_free`), widens it and signals it with
one arrival (`kv_ready`). So STAGES - 2 tiles' copies are in flight while it widens; the
lag of STAGES - 2 is the most that cannot deadlock (a stage is freed only once the tile
after it was signalled). Q is signalled as for bf16.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
)

from kernels.gluon_mla.parts import (
    BLOCK_M,
    block_bounds,
    block_rows,
    cp_async,
    cta_barrier,
    issue_tile,
    slot_offsets,
)
from kernels.plan_slice import program_slice, work_span

LOADER_WARPS = gl.constexpr(4)  # one warpgroup
LOADER_THREADS = gl.constexpr(LOADER_WARPS.value * 32)  # arrivals on a bf16 tile's or Q's mbarrier
V_STAGES = gl.constexpr(2)  # fp16 V (and P) buffers of the e4m3 decode
WIDEN_ROWS = gl.constexpr(8)  # rows of an e4m3 tile widened a pass (one 128-byte swizzle period)


@gluon.jit
def tile_stage(g, STAGES: gl.constexpr):
    """(buffer, mbarrier phase) of the program's tile `g` (counted over all its blocks)."""
    return g % STAGES, (g // STAGES) & 1


@gluon.jit
def _widen_v(lat_buf, v_buf, BLOCK_N: gl.constexpr, D_V: gl.constexpr):
    """The latent block of an e4m3 stage (``[BLOCK_N, D_V]``) into `v_buf` in fp16 (exact),
    `WIDEN_ROWS` rows a pass (32 values a thread); then fenced for the consumers' ``wgmma``."""
    WIDEN: gl.constexpr = gl.BlockedLayout([1, 16], [1, 32], [LOADER_WARPS, 1], [1, 0])
    for r in gl.static_range(BLOCK_N // WIDEN_ROWS):
        rows = lat_buf.slice(r * WIDEN_ROWS, WIDEN_ROWS).load(WIDEN)
        v_buf.slice(r * WIDEN_ROWS, WIDEN_ROWS).store(rows.to(gl.float16))
    fence_async_shared()


@gluon.jit
def _signal_widened(kv_lat, v_buf, v_ready, v_free, g, PENDING: gl.constexpr,
                    STAGES: gl.constexpr, BLOCK_N: gl.constexpr, D_V: gl.constexpr):  # fmt: skip
    """Once all but the last `PENDING` copy groups landed and the consumers released the V
    buffer, widen the program's tile `g` into it and signal it (one arrival, after every
    loader thread)."""
    async_copy.wait_group(PENDING)
    ring, phase = tile_stage(g, V_STAGES)
    mbarrier.wait(v_free.index(ring), phase ^ 1)  # both consumers are done with tile g - 2
    cta_barrier()  # every loader thread's copies of tile g landed
    _widen_v(kv_lat.index(g % STAGES), v_buf.index(ring), BLOCK_N, D_V)
    cta_barrier()
    mbarrier.arrive(v_ready.index(ring))


@gluon.jit
def loader(
    q_lat, q_rope, kv_lat, kv_rope, v_buf, kv_ready, kv_free, k_free, q_ready, q_free,
    q_ptr, kv_ptr, work_indptr_ptr, work_info_ptr, kv_indptr_ptr, kv_indices_ptr,
    kv_last_page_lens_ptr, qo_indptr_ptr, stride_q_tok, stride_q_head, stride_kv_block,
    stride_kv_slot, heads_per_work, fold_ratio, seq_q,
    PAGE_SIZE: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    D_V: gl.constexpr, D_R: gl.constexpr, GROUP_MODE: gl.constexpr, FAULT: gl.constexpr,
):  # fmt: skip
    """The loader partition: Q per block, then every KV tile into the next stage (e4m3: its V
    widened too)."""
    E4M3: gl.constexpr = kv_lat.dtype == gl.float8e4nv
    if E4M3:
        # 16 e4m3 values a cp.async vector, 8 rows x 64 columns a warp; 32 rows a pass.
        LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [LOADER_WARPS, 1], [1, 0])
        CHUNK: gl.constexpr = 32
        LAG: gl.constexpr = STAGES - 2  # tiles copied ahead of the widening
    else:
        # 8 bf16 values a vector, 4 rows x 64 columns a warp; 16 rows a pass (9 vectors a thread).
        LOAD: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [LOADER_WARPS, 1], [1, 0])
        CHUNK: gl.constexpr = 16
    gl.static_assert(BLOCK_N % CHUNK == 0, "a KV tile is whole loader passes")
    LOAD_ROW: gl.constexpr = gl.SliceLayout(1, LOAD)
    cols_v = gl.arange(0, D_V, layout=gl.SliceLayout(0, LOAD))
    cols_r = gl.arange(0, D_R, layout=gl.SliceLayout(0, LOAD))
    # The work range of `program_slice` (the scales are the consumers').
    grp, work_begin, work_end, _kv_scale, _score_scale = program_slice(
        work_indptr_ptr, work_info_ptr, fold_ratio, seq_q, work_indptr_ptr, work_indptr_ptr, 1.0,
        1.0, 1.0, False, GROUP_MODE, FAULT,
    )  # fmt: skip
    g = 0  # tiles of the blocks before this one (tile j of a block is the program's g + j)
    blk = 0  # blocks before this one
    for w in range(work_begin, work_end):
        (
            _, qo_start, group, _, q_begin, q_len, page_begin, _, kv_len, tok_lo, tok_hi,
            num_rows,
        ) = work_span(
            work_info_ptr, w, qo_indptr_ptr, kv_indptr_ptr, kv_last_page_lens_ptr,
            heads_per_work, fold_ratio, grp, PAGE_SIZE, GROUP_MODE, FAULT,
        )  # fmt: skip
        for m0 in range(0, num_rows, BLOCK_M):
            _row_hi, block_hi, num_tiles = block_bounds(
                m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, q_begin,
                q_len, kv_len, tok_lo, tok_hi, CAUSAL, BLOCK_N, LOAD_ROW,
            )  # fmt: skip
            mbarrier.wait(q_free, (blk & 1) ^ 1)  # both consumers are done with the last Q
            for r in gl.static_range(BLOCK_M // CHUNK):
                row_ok, _vrow, _local, token, head = block_rows(
                    m0 + r * CHUNK, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group,
                    LOAD_ROW, CHUNK,
                )  # fmt: skip
                q_row = token.to(gl.int64) * stride_q_tok + head.to(gl.int64) * stride_q_head
                q_base = q_ptr + q_row[:, None]
                cp_async(q_lat.slice(r * CHUNK, CHUNK), q_base + cols_v[None, :],
                          mask=row_ok[:, None])  # fmt: skip
                cp_async(q_rope.slice(r * CHUNK, CHUNK), q_base + D_V + cols_r[None, :],
                          mask=row_ok[:, None])  # fmt: skip
            async_copy.mbarrier_arrive(q_ready, increment_count=False)  # once Q landed
            for j in range(num_tiles):
                stage, phase = tile_stage(g + j, STAGES)
                mbarrier.wait(k_free.index(stage), phase ^ 1)  # its last tile released
                for r in gl.static_range(BLOCK_N // CHUNK):
                    slot, ok = slot_offsets(
                        kv_indices_ptr, page_begin, tok_lo + j * BLOCK_N + r * CHUNK, block_hi,
                        stride_kv_block, stride_kv_slot, CHUNK, PAGE_SIZE, LOAD_ROW,
                    )  # fmt: skip
                    issue_tile(
                        kv_ptr, slot, ok, kv_lat.index(stage).slice(r * CHUNK, CHUNK),
                        kv_rope.index(stage).slice(r * CHUNK, CHUNK), D_V, D_R, LOAD, E4M3,
                    )  # fmt: skip
                if E4M3:
                    if j >= LAG:
                        _signal_widened(kv_lat, v_buf, kv_ready, kv_free, g + j - LAG, LAG,
                                        STAGES, BLOCK_N, D_V)  # fmt: skip
                else:
                    # Each thread's arrival fires once its copies landed: the loader goes on to
                    # the next free stage at once, up to STAGES tiles in flight.
                    async_copy.mbarrier_arrive(kv_ready.index(stage), increment_count=False)
            if E4M3:  # the block's last tiles, copied by now
                for j in range(gl.maximum(num_tiles - LAG, 0), num_tiles):
                    _signal_widened(kv_lat, v_buf, kv_ready, kv_free, g + j, 0, STAGES, BLOCK_N,
                                    D_V)  # fmt: skip
            g += num_tiles
            blk += 1
