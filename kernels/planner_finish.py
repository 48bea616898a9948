"""The device planner's per-tile writes, and the grid that makes them for large batches.

`first_works` writes a tile's first work, its ``reduce_indptr`` entry, its
``reduce_final_map`` row and its first ``reduce_partial_map`` entry, from the walk's
answer (the tile's first program ``kf``, its further fragments ``cont``) and the tiles'
running sums; the walk kernel (kernels/triton_planner.py) calls it over every tile in its
one-program (fused) form. Beyond, the walk kernel keeps only the walk: it leaves ``kf``,
``cont`` and ``P_i`` per tile and the sums of each `BLOCK` of tiles in the scratch, and
`finish_kernel`, launched next on the same stream, one program per `BLOCK` tiles, scans
its block from the sums of the blocks before it (no program waits for another), writes
each tile's works (the continuation fragments too, one step per fragment) and each
program's ``work_indptr`` entry that a tile starts, and the ``reduce_indptr`` tail.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from kernels import planner_setup as ps


@triton.jit
def kv_offset(ke, kve, last, page_size, PAGE1: tl.constexpr):
    """Tokens of the batch after page ``ke`` (AITER's kv_offset)."""
    if PAGE1:
        off = kve - ke
    else:
        off = tl.where(ke == kve, 0, (kve - ke - 1) * page_size + last)
    return off


@triton.jit
def store_work(wis_ptr, w, mask, vb, loc, qs, qe, ks, ke, off):
    """``work_info_set[w]`` = (vb, loc, qs, qe, ks, ke, off, 0) where `mask`."""
    row = wis_ptr + w * 8
    tl.store(row + 0, vb, mask=mask)
    tl.store(row + 1, loc, mask=mask)
    tl.store(row + 2, qs, mask=mask)
    tl.store(row + 3, qe, mask=mask)
    tl.store(row + 4, ks, mask=mask)
    tl.store(row + 5, ke, mask=mask)
    tl.store(row + 6, off, mask=mask)
    tl.store(row + 7, tl.zeros_like(vb), mask=mask)


@triton.jit
def tile_sums(valid, cont, tsize):
    """Per tile: (works << 16 | 1 for a tile, partials, partial rows), summed by the scans.

    Fewer than 2**15 works and 2**16 tiles (the host bounds entries and programs), so the
    low half of the first never carries into the high one.
    """
    g = tl.where(valid, 1 + cont, 0)
    gp = tl.where(cont > 0, g, 0)
    return (g << 16) + valid.to(tl.int32), gp, gp * tsize


@triton.jit
def first_works(ptrs, tile, walked, firsts, sizes, scalars, PAGE1: tl.constexpr):
    """Write each tile's first work and reduce entries; (is_split, fresh, base) per tile.

    ``ptrs`` = (wis, rip, rfm, rpm, starts: the programs' start positions), ``tile`` =
    (vb, q_start, q_end, kvb, kv_stop, kve, last), ``walked`` = (valid, kf, cont, P_i),
    ``firsts`` = (w_first, tile_id, red_first, loc_first, partials), ``sizes`` =
    (max_work, tile_cnt, pm_len), ``scalars`` = (num_cu, gran, page_size).
    """
    wis_ptr, rip_ptr, rfm_ptr, rpm_ptr, starts_ptr = ptrs
    vb, q_start, q_end, kvb, kv_stop, kve, last = tile
    valid, kf, cont, p = walked
    w_first, tile_id, red_first, loc_first, gp = firsts
    max_work, tile_cnt, pm_len = sizes
    num_cu, gran, page_size = scalars
    is_split = valid & (cont > 0)
    y_here = tl.load(starts_ptr + kf, mask=valid & (kf <= num_cu), other=-1)
    y_next = tl.load(starts_ptr + kf + 1, mask=is_split & (kf < num_cu), other=0)
    fresh = valid & (y_here == p)
    base = y_next - p  # blocks of a split tile's first fragment
    ke_first = tl.where(is_split, tl.minimum(kvb + base * gran, kv_stop), kv_stop)
    loc = tl.where(is_split, loc_first, -1)
    ok = valid & (w_first < max_work)
    off_first = kv_offset(ke_first, kve, last, page_size, PAGE1)
    store_work(wis_ptr, w_first, ok, vb, loc, q_start, q_end, kvb, ke_first, off_first)
    rfm_ok = valid & (tile_id < tile_cnt)
    tl.store(rip_ptr + tile_id + 1, red_first + gp, mask=rfm_ok)
    tl.store(rfm_ptr + tile_id * 2, tl.where(is_split, q_start, -1), mask=rfm_ok)
    tl.store(rfm_ptr + tile_id * 2 + 1, tl.where(is_split, q_end, -1), mask=rfm_ok)
    tl.store(rpm_ptr + red_first, loc_first, mask=is_split & (red_first < pm_len))
    return is_split, fresh, base


@triton.jit
def add3(a0, a1, a2, b0, b1, b2):
    return a0 + b0, a1 + b1, a2 + b2


@triton.jit
def _get(scratch_ptr, stride, field, e, mask, other):
    return tl.load(scratch_ptr + field * stride + e, mask=mask, other=other)


_RUNTIME_SCALARS = ("stride", "num_cu", "num_splits", "gran_shift", "page_size")
_RUNTIME_SCALARS += ("max_work", "tile_cnt", "pm_len")


@triton.jit(do_not_specialize=_RUNTIME_SCALARS)
def finish_kernel(
    wip_ptr, wis_ptr, rip_ptr, rfm_ptr, rpm_ptr, counts_ptr,  # the plan's buffers
    scratch_ptr, starts_ptr,  # the walk's per-tile results and per-block sums
    stride, num_cu, num_splits, gran_shift, page_size, max_work, tile_cnt, pm_len,
    PAGE1: tl.constexpr, BLOCK: tl.constexpr, NBLOCKS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """Grid: one program per ``BLOCK`` tiles (``NBLOCKS``: their count, a power of two up).

    ``PDL``: launched as the walk kernel's programmatic dependent; waits for it first.
    """
    if PDL:
        gdc_wait()
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    ein = e < stride
    gran = 1 << gran_shift
    vb = _get(scratch_ptr, stride, ps.F_VB, e, ein, 0)
    q_start = _get(scratch_ptr, stride, ps.F_QS, e, ein, 0)
    q_end = _get(scratch_ptr, stride, ps.F_QE, e, ein, 0)
    kvb = _get(scratch_ptr, stride, ps.F_KVB, e, ein, 0)
    kv_stop = _get(scratch_ptr, stride, ps.F_STOP, e, ein, 0)
    kve = _get(scratch_ptr, stride, ps.F_KVE, e, ein, 0)
    last = _get(scratch_ptr, stride, ps.F_LAST, e, ein, 1)
    tsize = _get(scratch_ptr, stride, ps.F_TS, e, ein, 0)
    valid = (_get(scratch_ptr, stride, ps.F_FLAG, e, ein, 0) & ps.FLAG_VALID) != 0
    kf = _get(scratch_ptr, stride, ps.F_KF, e, ein, 0)
    cont = _get(scratch_ptr, stride, ps.F_CONT, e, ein, 0)
    p = _get(scratch_ptr, stride, ps.F_P, e, ein, 0)

    # ---- this block's running sums, from the sums of the blocks before it ---------------
    blocks = tl.arange(0, NBLOCKS)
    before = blocks < pid
    gv_off = tl.sum(_get(scratch_ptr, stride, ps.F_SUM_GV, blocks, before, 0), axis=0)
    gp_off = tl.sum(_get(scratch_ptr, stride, ps.F_SUM_GP, blocks, before, 0), axis=0)
    pw_off = tl.sum(_get(scratch_ptr, stride, ps.F_SUM_PW, blocks, before, 0), axis=0)
    gv, gp, pw = tile_sums(valid, cont, tsize)
    gv_first, red_first, loc_first = tl.associative_scan((gv, gp, pw), 0, add3)
    gv_first += gv_off - gv
    red_first += gp_off - gp
    loc_first += pw_off - pw
    w_first = gv_first >> 16
    firsts = (w_first, gv_first & 0xFFFF, red_first, loc_first, gp)
    ptrs = (wis_ptr, rip_ptr, rfm_ptr, rpm_ptr, starts_ptr)
    tile = (vb, q_start, q_end, kvb, kv_stop, kve, last)
    sizes = (max_work, tile_cnt, pm_len)
    scalars = (num_cu, gran, page_size)
    is_split, fresh, base = first_works(
        ptrs, tile, (valid, kf, cont, p), firsts, sizes, scalars, PAGE1
    )
    tl.store(wip_ptr + kf, w_first, mask=fresh & (kf < num_cu))

    # ---- the continuation fragments: fragment dd starts program kf + dd -----------------
    p_total = tl.load(counts_ptr + 4)
    d = tl.maximum((p_total + num_splits - 1) // num_splits, 1)
    most = tl.max(tl.where(is_split, cont, 0), axis=0)
    for dd in range(1, most + 1):
        here = is_split & (dd <= cont) & (kf + dd < num_cu)
        c_ks = kvb + (base + (dd - 1) * d) * gran
        c_ke = tl.where(dd == cont, kv_stop, tl.minimum(kvb + (base + dd * d) * gran, kv_stop))
        c_loc = loc_first + dd * tsize
        c_w = w_first + dd
        c_off = kv_offset(c_ke, kve, last, page_size, PAGE1)
        store_work(
            wis_ptr, c_w, here & (c_w < max_work), vb, c_loc, q_start, q_end, c_ks, c_ke, c_off
        )
        tl.store(rpm_ptr + red_first + dd, c_loc, mask=here & (red_first + dd < pm_len))
        tl.store(wip_ptr + kf + dd, c_w, mask=here)

    # ---- reduce_indptr: 0, then num_partials past the last tile -------------------------
    num_partials = tl.load(counts_ptr + 1)
    num_tiles = tl.load(counts_ptr + 2)
    tl.store(rip_ptr, 0, mask=pid == 0)
    tail = tl.maximum(tile_cnt - num_tiles, 0)
    ps.fill_span(rip_ptr + num_tiles + 1, tail, num_partials, pid, tl.num_programs(0), BLOCK)
