"""The loader partition of the warp-specialized decode (`kernels.gluon_mla.ws_kernel`): Q
and the KV tiles into shared memory with ``cp.async``, each tile signalled on an mbarrier
once it landed; and the stage arithmetic it shares with the consumers (`tile_stage`).

The loader never waits for its own copies: each thread's ``cp.async.mbarrier.arrive``
(``noinc``) fires once that thread's copies landed, so `kv_ready` and `q_ready` count
`LOADER_THREADS` arrivals, and up to ``STAGES`` tiles are in flight. The copies land through
the generic proxy; a consumer fences (``fence.proxy.async``) after its wait, before its
``wgmma`` reads them.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    mbarrier,
)

from kernels.gluon_mla.parts import (
    BLOCK_M,
    block_bounds,
    block_rows,
    cp_async,
    issue_tile,
    slot_offsets,
)
from kernels.plan_slice import program_slice, work_span

CHUNK = gl.constexpr(16)  # rows a loader pass copies (16 x 576 bf16: 9 vectors a thread)
LOADER_WARPS = gl.constexpr(4)  # one warpgroup
LOADER_THREADS = gl.constexpr(LOADER_WARPS.value * 32)  # arrivals on a tile's or Q's mbarrier


@gluon.jit
def tile_stage(g, STAGES: gl.constexpr):
    """(buffer, mbarrier phase) of the program's tile `g` (counted over all its blocks)."""
    return g % STAGES, (g // STAGES) & 1


@gluon.jit
def loader(
    q_lat, q_rope, kv_lat, kv_rope, kv_ready, kv_free, q_ready, q_free,
    q_ptr, kv_ptr, work_indptr_ptr, work_info_ptr, kv_indptr_ptr, kv_indices_ptr,
    kv_last_page_lens_ptr, qo_indptr_ptr, stride_q_tok, stride_q_head, stride_kv_block,
    stride_kv_slot, heads_per_work, fold_ratio, seq_q,
    PAGE_SIZE: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    D_V: gl.constexpr, D_R: gl.constexpr, GROUP_MODE: gl.constexpr, FAULT: gl.constexpr,
):  # fmt: skip
    """The loader partition: Q per block, then every KV tile into the next stage."""
    LOAD: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [LOADER_WARPS, 1], [1, 0])
    LOAD_ROW: gl.constexpr = gl.SliceLayout(1, LOAD)
    cols_v = gl.arange(0, D_V, layout=gl.SliceLayout(0, LOAD))
    cols_r = gl.arange(0, D_R, layout=gl.SliceLayout(0, LOAD))
    # The work range of `program_slice` (the scales are the consumers').
    grp, work_begin, work_end, _kv_scale, _score_scale = program_slice(
        work_indptr_ptr, work_indptr_ptr, work_indptr_ptr, 1.0, 1.0, 1.0, False, GROUP_MODE, FAULT,
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
                mbarrier.wait(kv_free.index(stage), phase ^ 1)  # its last tile released
                for r in gl.static_range(BLOCK_N // CHUNK):
                    slot, ok = slot_offsets(
                        kv_indices_ptr, page_begin, tok_lo + j * BLOCK_N + r * CHUNK, block_hi,
                        stride_kv_block, stride_kv_slot, CHUNK, PAGE_SIZE, LOAD_ROW,
                    )  # fmt: skip
                    issue_tile(
                        kv_ptr, slot, ok, kv_lat.index(stage).slice(r * CHUNK, CHUNK),
                        kv_rope.index(stage).slice(r * CHUNK, CHUNK), D_V, D_R, LOAD, False,
                    )  # fmt: skip
                # Each thread's arrival fires once its copies landed: the loader goes on to the
                # next free stage at once, up to STAGES tiles in flight.
                async_copy.mbarrier_arrive(kv_ready.index(stage), increment_count=False)
            g += num_tiles
            blk += 1
