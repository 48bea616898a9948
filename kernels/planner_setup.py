"""The device planner's per-tile setup and its fill of the buffers, spread over many programs.

`tile_fields` is the reference planner's tile setup (conformance/persistent/setup.py) for
a vector of (virtual batch, tile) entries; the walk kernel (kernels/triton_planner.py)
calls it itself in its one-program (fused) form. `setup_kernel` runs it over a grid
instead, one entry per lane, writes every field the walk and the continuation works need
into the scratch (field-major: field ``f`` of entry ``e`` at ``f * stride + e``), and sets
``work_info_set``, ``reduce_final_map`` and ``reduce_partial_map`` to -1 (`UNWRITTEN`)
whole; the walk kernel, launched next on the same stream, writes over the used entries.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

# Scratch fields, field-major. 0-7 and 15-17: written by the setup; 8-14: by the one-program
# walk; 12, 13 and 18-21: by the walk for the finish grid (kernels/planner_finish.py).
F_VB = tl.constexpr(0)
F_QS = tl.constexpr(1)
F_QE = tl.constexpr(2)
F_KVB = tl.constexpr(3)
F_STOP = tl.constexpr(4)
F_KVE = tl.constexpr(5)
F_LAST = tl.constexpr(6)
F_TS = tl.constexpr(7)
F_BASE = tl.constexpr(8)  # 8-10: of a split tile
F_LOC = tl.constexpr(9)
F_RED = tl.constexpr(10)
F_W = tl.constexpr(11)  # 11-14: of a split tile or one that starts a program
F_KF = tl.constexpr(12)
F_CONT = tl.constexpr(13)
F_FRESH = tl.constexpr(14)
F_COST = tl.constexpr(15)  # blocks + overhead of a valid tile, else 0
F_FLAG = tl.constexpr(16)  # FLAG_BAD | FLAG_BIG | FLAG_VALID
F_TAU = tl.constexpr(17)  # page 1: where a tile's tail starts to be absorbed, minus P_i
F_P = tl.constexpr(18)  # P_i: the prefix sum of the costs before the tile
F_SUM_GV = tl.constexpr(19)  # 19-21: per block of tiles, the sums of `planner_finish.tile_sums`
F_SUM_GP = tl.constexpr(20)
F_SUM_PW = tl.constexpr(21)
SCRATCH_FIELDS = tl.constexpr(22)
FLAG_BAD = tl.constexpr(1)  # the entry's batch breaks a rule the reference checks
FLAG_BIG = tl.constexpr(2)  # its block count reaches MAX_COST
FLAG_VALID = tl.constexpr(4)  # a real tile (not padding)
MAX_COST = tl.constexpr(2**28)  # bound on the sum of tile costs: int32 arithmetic never wraps


@triton.jit
def tile_fields(e, qo_ptr, kv_ptr, last_ptr, batch, tiling_of, PAGE1: tl.constexpr):
    """Per entry: (vb, q_start, q_end, kvb, kv_stop, kve, last, tsize, cost, flag, tau).

    ``batch`` = (num_batches, ratio, uni, heads, packed_rows, max_sq, overhead, ntmax) and
    ``tiling_of`` = (gran_shift, page_size, causal, tiling, folded_tail), the kernels' scalars.
    """
    num_batches, ratio, uni, heads, packed_rows, max_sq, overhead, ntmax = batch
    gran_shift, page_size, causal, tiling, folded_tail = tiling_of
    gran = 1 << gran_shift
    in_range = e < num_batches * ratio * ntmax
    vb = e // ntmax
    t = e - vb * ntmax
    b = vb // ratio
    kvb = tl.load(kv_ptr + b, mask=in_range, other=0)
    kve = tl.load(kv_ptr + b + 1, mask=in_range, other=0)
    qb = tl.load(qo_ptr + b, mask=in_range, other=0)
    qe = tl.load(qo_ptr + b + 1, mask=in_range, other=1)
    last = tl.load(last_ptr + b, mask=in_range, other=1)
    seqlen = qe - qb
    bad = in_range & ((seqlen < 1) | (seqlen > max_sq) | (kve < kvb))
    if uni > 0:
        bad |= in_range & ((qb != uni * b) | (qe != uni * (b + 1)))
    seqlen = tl.maximum(seqlen, 1)
    if ratio > 1:
        q_begin = uni * vb
        q_stop = q_begin + uni
    else:
        q_begin = qb
        q_stop = qe
    # qo tiles per virtual batch: 0 one, 1 one per q token, 2 packed rows of heads
    ntiles = tl.where(
        tiling == 0,
        1,
        tl.where(tiling == 1, seqlen, (seqlen * heads + packed_rows - 1) // packed_rows),
    )
    tsize = (seqlen + ntiles - 1) // ntiles
    bad |= in_range & ((ntiles - 1) * tsize >= seqlen)
    pages = kve - kvb
    if PAGE1:
        tokens = pages
    else:
        bad |= in_range & (pages > 0) & ((last < 1) | (last > page_size))
        tokens = tl.where(pages > 0, (pages - 1) * page_size + last, 0)
    bad |= in_range & (causal != 0) & (tokens < seqlen)
    valid = in_range & (t < ntiles)
    nblk = (pages + gran - 1) >> gran_shift
    q_start = q_begin + t * tsize
    q_end = tl.minimum(q_start + tsize, q_stop)
    if PAGE1:  # the causal trim of a tile's kv (folded: AITER's v1.2 formula)
        bt = tl.where(folded_tail != 0, ntiles - (q_start // ratio) % uni - 1, ntiles - 1 - t)
        kv_stop = kve - tl.where(causal != 0, tl.maximum(bt, 0), 0)  # kv end of its last work
        # a fragment ending at t - overhead is absorbed whole once t >= P_i + tau
        tau = overhead + tl.maximum((kve - max_sq + 1 - kvb + gran - 1) >> gran_shift, 0)
    else:
        kv_stop = kve
        tau = tl.zeros_like(kve)
    cost = tl.where(valid, nblk + overhead, 0)
    flag = (
        bad.to(tl.int32) * FLAG_BAD
        + (valid & (nblk >= MAX_COST)).to(tl.int32) * FLAG_BIG
        + valid.to(tl.int32) * FLAG_VALID
    )
    return vb, q_start, q_end, kvb, kv_stop, kve, last, tsize, cost, flag, tau


@triton.jit
def put_fields(scratch_ptr, stride, first: tl.constexpr, e, values, mask):
    """Scratch fields ``first``, ``first + 1``, ... of entries `e` = the tuple `values`."""
    for i in tl.static_range(len(values)):
        tl.store(scratch_ptr + (first + i) * stride + e, values[i], mask=mask)


@triton.jit
def fill_span(ptr, n, value, pid, num_programs, BLOCK: tl.constexpr):
    """This program's share of ``ptr[0:n] = value`` (shares of whole BLOCKs)."""
    share = tl.cdiv(tl.cdiv(n, BLOCK), num_programs) * BLOCK
    lo = pid * share
    for off in range(0, share, BLOCK):
        idx = lo + off + tl.arange(0, BLOCK)
        tl.store(ptr + idx, tl.full([BLOCK], value, tl.int32), mask=idx < tl.minimum(lo + share, n))


# The scalars of `tile_fields`, not specialized on (kernels/triton_planner.py says why).
BATCH_SCALARS = ("num_batches", "ratio", "uni", "heads", "packed_rows", "max_sq")
TILING_SCALARS = ("gran_shift", "page_size", "causal", "tiling", "folded_tail")
_RUNTIME_SCALARS = ("stride", *BATCH_SCALARS, "overhead", "ntmax", *TILING_SCALARS)
_RUNTIME_SCALARS += ("wis_len", "rfm_len", "rpm_len")


@triton.jit(do_not_specialize=_RUNTIME_SCALARS)
def setup_kernel(
    qo_ptr,
    kv_ptr,
    last_ptr,
    wis_ptr,
    rfm_ptr,
    rpm_ptr,
    scratch_ptr,
    num_batches,
    stride,
    ratio,
    uni,
    heads,
    packed_rows,
    max_sq,
    overhead,
    ntmax,
    gran_shift,
    page_size,
    causal,
    tiling,
    folded_tail,
    wis_len,
    rfm_len,
    rpm_len,
    PAGE1: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    """Grid: entries / BLOCK programs at least (the host takes more for a large fill).

    ``PDL``: the walk kernel may be launched at once (it waits for this grid's end).
    """
    if PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    batch = (num_batches, ratio, uni, heads, packed_rows, max_sq, overhead, ntmax)
    tiling_of = (gran_shift, page_size, causal, tiling, folded_tail)
    fields = tile_fields(e, qo_ptr, kv_ptr, last_ptr, batch, tiling_of, PAGE1)
    vb, q_start, q_end, kvb, kv_stop, kve, last, tsize, cost, flag, tau = fields
    static = (vb, q_start, q_end, kvb, kv_stop, kve, last, tsize)
    put_fields(scratch_ptr, stride, F_VB, e, static, e < stride)
    put_fields(scratch_ptr, stride, F_COST, e, (cost, flag, tau), e < stride)
    fill_span(wis_ptr, wis_len, -1, pid, nprog, BLOCK)
    fill_span(rfm_ptr, rfm_len, -1, pid, nprog, BLOCK)
    fill_span(rpm_ptr, rpm_len, -1, pid, nprog, BLOCK)
