"""The persistent-decode planner's walk as one Triton program: AITER's v1.2 walk without a loop.

It writes the same buffers as the reference planner (conformance/persistent/planner.py) from
device-resident ``qo_indptr``, ``kv_indptr`` and ``kv_last_page_lens``, with no host sync,
into buffers of fixed size (CUDA-graph capturable). One program (CTA) holds every qo tile
in registers (one lane per tile; the host pads tiles to ``NTMAX`` per virtual batch).
``PDL``: it is launched as the setup kernel's programmatic dependent and waits for it
before reading anything. ``FUSED``: it computes the tiles' setup itself
(`planner_setup.tile_fields`) and fills every unused entry; else it loads the setup's
fields from the scratch, where the setup kernel (kernels/planner_setup.py), launched before
it, wrote them after setting ``work_info_set``, ``reduce_final_map`` and
``reduce_partial_map`` to -1 whole.

The walk, in the cost space of the reference's fast walk (tile ``i`` spans
``[P_i, P_i + blocks_i + overhead)``, ``P`` the prefix sum of tile costs): a program that
starts at ``y`` with payload ``L`` ends at ``H(y + L)``, where for ``t`` in tile ``j``
``H(t) = P_j`` when ``t - P_j <= overhead`` (the rest is wasted), ``P_{j+1}`` when the
fragment ending at ``t - overhead`` leaves fewer than ``max_seqlen_qo`` tokens (page 1:
the #2106 tail is absorbed), and ``t - overhead`` otherwise (a fragment fills the
program). Between two such snaps the program starts form the progression
``a + k * (L - overhead)``, so one round finds, for every tile at once, the first step of
the progression that snaps in it (a min-reduction), instead of one step per program. A
round costs a few vector operations; there is one per snap (waste or absorbed tail) plus
one. The per-tile divisions by ``L - overhead`` are made once (quotient and remainder)
and every round only compares them.

Then every tile writes its first work, reduce entries and partial entries, and every
program writes its ``work_indptr`` entry and the continuation fragment it starts with
(found through a per-program mark array and a running max). Every entry the plan does
not use holds -1 (`UNWRITTEN`) and the ``reduce_indptr`` tail ``num_partials``, so the
buffers equal the reference's whole.

``counts`` receives ``(num_works, num_partials, num_tiles, status, sum_blocks, payload)``;
``status`` is a bit set of `STATUS_BITS` (0: a valid plan).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from kernels import planner_chain as pc
from kernels import planner_finish as pf
from kernels import planner_setup as ps

STATUS_BITS = {1: "bad input", 2: "tiles left over", 4: "buffer too small", 8: "cost overflow"}


@triton.jit
def _fill(ptr, start, stop, value, BLOCK: tl.constexpr):
    """ptr[start:stop] = value (stop known to the host as an upper bound)."""
    for off in range(0, stop, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        tl.store(ptr + idx, tl.full([BLOCK], value, tl.int32), mask=(idx >= start) & (idx < stop))


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _or_add(a0, a1, b0, b1):
    return a0 | b0, a1 + b1


@triton.jit
def _or_add_add(a0, a1, a2, b0, b1, b2):
    return a0 | b0, a1 + b1, a2 + b2


@triton.jit
def _round(s, a, kf, cont, y, left, tiles, scalars, PAGE1: tl.constexpr):
    """One round from the program ``s`` starting at ``a``: the walk to the next snap.

    Returns (s, a, kf, cont, y, left) after it and its ``r_star`` (programs before the
    snap, minus one); ``tiles`` = (q_p, r_p, q_pe, r_pe, q_tau, r_tau, valid, k),
    ``scalars`` = (o, d, num_cu, q_n, r_n, p_total).
    """
    q_p, r_p, q_pe, r_pe, q_tau, r_tau, valid, k = tiles
    o, d, num_cu, q_n, r_n, p_total = scalars
    big = num_cu + 1
    q_b, r_b, r_lo, r_hi, has_t, key = pc.round_keys(
        a, o, d, big, q_p, r_p, q_pe, r_pe, q_tau, r_tau, valid, PAGE1
    )
    r_end = tl.maximum(pc.floor_diff(q_n, r_n, q_b, r_b), 0)
    key_end = (tl.minimum(r_end, big).to(tl.int64) << 32) | p_total.to(tl.int64)
    best = tl.minimum(tl.min(key, axis=0), key_end)
    r_star64 = best >> 32
    r_star = r_star64.to(tl.int32)
    snap = (best - (r_star64 << 32)).to(tl.int32)
    left |= (r_star >= num_cu - s).to(tl.int32)
    q_a = a // d
    r_a = a - q_a * d
    pj = q_p * d + r_p
    here = valid & (pj >= a) & (pj < snap)
    kf = tl.where(here, s + tl.minimum(pc.floor_diff(q_p, r_p, q_a, r_a), r_star), kf)
    split = has_t & (r_lo < r_star)
    cont = tl.where(split, tl.minimum(r_hi, r_star - 1) - r_lo + 1, cont)
    in_run = (k >= s) & (k <= s + r_star)
    y = tl.where(in_run, a + (k - s) * d, y)
    y = tl.where(k == s + r_star + 1, snap, y)
    return s + r_star + 1, snap, kf, cont, y, left, r_star


@triton.jit
def _get(scratch_ptr, stride, field, e, mask, other):
    return tl.load(scratch_ptr + field * stride + e, mask=mask, other=other)


@triton.jit
def _add2(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


# The batch's scalars change every step: specializing on them (Triton keys a compile on an
# int being 1 or a multiple of 16) would compile a new variant for many batches.
_RUNTIME_SCALARS = (*ps.BATCH_SCALARS, "num_cu", "num_splits", "overhead", "ntmax")
_RUNTIME_SCALARS += ("max_work", "tile_cnt", "pm_len", *ps.TILING_SCALARS, "stride")


@triton.jit(do_not_specialize=_RUNTIME_SCALARS)
def plan_kernel(
    qo_ptr,
    kv_ptr,
    last_ptr,
    wip_ptr,
    wis_ptr,
    rip_ptr,
    rfm_ptr,
    rpm_ptr,
    counts_ptr,
    scratch_ptr,
    mark_ptr,
    chain_ptr,
    num_batches,
    ratio,
    uni,
    heads,
    packed_rows,
    max_sq,
    num_cu,
    num_splits,
    overhead,
    ntmax,
    max_work,
    tile_cnt,
    pm_len,
    gran_shift,
    page_size,
    causal,
    tiling,
    folded_tail,
    stride,
    PAGE1: tl.constexpr,
    FUSED: tl.constexpr,
    BLOCK: tl.constexpr,
    KBLOCK: tl.constexpr,
    FILL_BLOCK: tl.constexpr,
    FINISH_BLOCK: tl.constexpr,
    PDL: tl.constexpr,
    CHAIN: tl.constexpr,
    WINDOW: tl.constexpr,
    LEVELS: tl.constexpr,
):
    if PDL:  # launched early (programmatic dependent launch): the setup kernel must end first
        gdc_wait()
        gdc_launch_dependents()  # the finish grid may launch (it waits for this program)
    gran = 1 << gran_shift
    o = overhead
    # ---- per entry (virtual batch, tile): the setup's fields, computed or loaded --------
    e = tl.arange(0, BLOCK)
    in_range = e < stride
    if FUSED:
        batch = (num_batches, ratio, uni, heads, packed_rows, max_sq, overhead, ntmax)
        tiling_of = (gran_shift, page_size, causal, tiling, folded_tail)
        fields = ps.tile_fields(e, qo_ptr, kv_ptr, last_ptr, batch, tiling_of, PAGE1)
        vb, q_start, q_end, kvb, kv_stop, kve, last, tsize, cost, flag, tau = fields
    else:  # the walk needs these four; the finish grid loads the rest
        tsize = _get(scratch_ptr, stride, ps.F_TS, e, in_range, 0)
        cost = _get(scratch_ptr, stride, ps.F_COST, e, in_range, 0)
        flag = _get(scratch_ptr, stride, ps.F_FLAG, e, in_range, 0)
        tau = _get(scratch_ptr, stride, ps.F_TAU, e, in_range, 0)
    valid = (flag & ps.FLAG_VALID) != 0

    # ---- costs, their prefix sum, and its quotients by the payload ---------------------
    if CHAIN:  # P_WINDOW too, for the chain's test at boundary 0
        p_w = tl.where(e < WINDOW, cost, 0)
        flags, total64, p_w = tl.reduce((flag, cost.to(tl.int64), p_w), 0, _or_add_add)
    else:
        flags, total64 = tl.reduce((flag, cost.to(tl.int64)), 0, _or_add)
        p_w = 0
    bad_any = ((flags & ps.FLAG_BAD) != 0).to(tl.int32)
    bad_any |= (tl.load(kv_ptr) != 0).to(tl.int32) | (tl.load(qo_ptr) != 0).to(tl.int32)
    overflow = (total64 >= ps.MAX_COST) | ((flags & ps.FLAG_BIG) != 0)
    p_end = tl.cumsum(cost, axis=0)  # P_{i+1}
    p = p_end - cost  # P_i
    p_total = total64.to(tl.int32)
    d = tl.maximum((p_total + num_splits - 1) // num_splits, 1)  # payload minus overhead
    q_p = p // d
    r_p = p - q_p * d
    q_pe = p_end // d
    r_pe = p_end - q_pe * d
    if PAGE1:  # a fragment ending at t - o is absorbed whole once t >= P_i + tau
        q_tau = (p + tau) // d
        r_tau = p + tau - q_tau * d
    else:
        q_tau = q_p
        r_tau = r_p
    q_n = p_total // d
    r_n = p_total - q_n * d

    # ---- the snaps: one round per snap, or all at once along a chain of boundaries ------
    k = tl.arange(0, KBLOCK)
    kf = tl.zeros([BLOCK], tl.int32)  # program of a tile's first work
    cont = tl.zeros([BLOCK], tl.int32)  # its further works (fragments)
    y = tl.zeros([KBLOCK], tl.int32)  # where each program starts (cost space)
    s = tl.full([], 0, tl.int32)
    a = tl.full([], 0, tl.int32)
    left = tl.full([], 0, tl.int32)
    rounds = tl.full([], 0, tl.int32)
    tiles = (q_p, r_p, q_pe, r_pe, q_tau, r_tau, valid, k)
    scalars = (o, d, num_cu, q_n, r_n, p_total)
    chained = tl.full([], 0, tl.int1)
    kf_c = kf
    cont_c = cont
    y_c = y
    left_c = left
    if (num_cu > 0) & (p_total > 0):  # the first round, and from it whether to try the chain
        s, a, kf, cont, y, left, r_star = _round(s, a, kf, cont, y, left, tiles, scalars, PAGE1)
        rounds = 1
        if CHAIN:
            if pc.boundary0_known(r_star, p_w, o, d, stride, WINDOW):
                ptrs = (chain_ptr, mark_ptr)
                walked = pc.chain_walk(
                    ptrs, stride, tiles, scalars, PAGE1, BLOCK, KBLOCK, WINDOW, LEVELS
                )
                chained, kf_c, cont_c, y_c, left_c = walked
    while (s < num_cu) & (a < p_total) & (~chained):
        s, a, kf, cont, y, left, r_star = _round(s, a, kf, cont, y, left, tiles, scalars, PAGE1)
        rounds += 1
    left |= (a < p_total).to(tl.int32)
    kf = tl.where(chained, kf_c, kf)
    cont = tl.where(chained, cont_c, cont)
    y = tl.where(chained, y_c, y)
    left = tl.where(chained, left_c, left)
    rounds = tl.where(chained, 0, rounds)
    tl.store(mark_ptr + KBLOCK + k, y, mask=k <= num_cu)  # program starts, for the gathers
    tl.store(mark_ptr + k, tl.full([KBLOCK], -1, tl.int32), mask=k < num_cu)

    # ---- per tile: counts, running sums, first works -------------------------------------
    p = q_p * d + r_p
    gv, gp, pw = pf.tile_sums(valid, cont, tsize)
    gv_all, num_partials = tl.reduce((gv, gp), 0, _add2)
    num_works = gv_all >> 16
    num_tiles = gv_all & 0xFFFF
    too_small = (num_works > max_work) | (num_partials > pm_len) | (num_tiles > tile_cnt)
    if FUSED:
        _tiles_and_programs(
            (wip_ptr, wis_ptr, rip_ptr, rfm_ptr, rpm_ptr),
            (scratch_ptr, mark_ptr),
            (vb, q_start, q_end, kvb, kv_stop, kve, last, tsize),
            (valid, kf, cont, p, gv, gp, pw),
            (num_works, num_partials, num_tiles),
            (max_work, tile_cnt, pm_len, num_cu, d, stride, gran, page_size),
            PAGE1,
            BLOCK,
            KBLOCK,
            FILL_BLOCK,
        )
    else:  # handed to the finish grid: kf, cont, P_i per tile, the sums per block of tiles
        ps.put_fields(scratch_ptr, stride, ps.F_KF, e, (kf, cont), in_range)
        ps.put_fields(scratch_ptr, stride, ps.F_P, e, (p,), in_range)
        nb = tl.arange(0, BLOCK // FINISH_BLOCK)
        nb_in = nb * FINISH_BLOCK < stride
        for i in tl.static_range(3):
            block_sums = tl.sum(
                tl.reshape((gv, gp, pw)[i], (BLOCK // FINISH_BLOCK, FINISH_BLOCK)), axis=1
            )
            tl.store(scratch_ptr + (ps.F_SUM_GV + i) * stride + nb, block_sums, mask=nb_in)
        # programs past the last one with work; the grid writes those before it
        used = tl.max(tl.where(valid, kf + cont + 1, 0), axis=0)
        tl.store(
            wip_ptr + k, tl.full([KBLOCK], 0, tl.int32) + num_works, mask=(k >= used) & (k < num_cu)
        )
        tl.store(wip_ptr + num_cu, num_works)
    status = bad_any | (left << 1) | (too_small.to(tl.int32) << 2) | (overflow.to(tl.int32) << 3)
    tl.store(counts_ptr + 0, num_works)
    tl.store(counts_ptr + 1, num_partials)
    tl.store(counts_ptr + 2, num_tiles)
    tl.store(counts_ptr + 3, status)
    tl.store(counts_ptr + 4, p_total)  # sum_blocks (blocks plus overhead of every tile)
    tl.store(counts_ptr + 5, (p_total + num_splits - 1) // num_splits + o)  # payload
    tl.store(counts_ptr + 6, rounds)  # 0 when the chain found every snap


@triton.jit
def _tiles_and_programs(
    ptrs,
    work_ptrs,
    tile,
    walked,
    totals,
    sizes,
    PAGE1: tl.constexpr,
    BLOCK: tl.constexpr,
    KBLOCK: tl.constexpr,
    FILL_BLOCK: tl.constexpr,
):
    """The one-program form's writes: every tile's first work, every program's
    ``work_indptr`` entry and continuation fragment, and every unused entry."""
    wip_ptr, wis_ptr, rip_ptr, rfm_ptr, rpm_ptr = ptrs
    scratch_ptr, mark_ptr = work_ptrs
    vb, q_start, q_end, kvb, kv_stop, kve, last, tsize = tile
    valid, kf, cont, p, gv, gp, pw = walked
    num_works, num_partials, num_tiles = totals
    max_work, tile_cnt, pm_len, num_cu, d, stride, gran, page_size = sizes
    e = tl.arange(0, BLOCK)
    k = tl.arange(0, KBLOCK)
    gv_first, red_first, loc_first = tl.associative_scan((gv, gp, pw), 0, pf.add3)
    gv_first -= gv
    w_first = gv_first >> 16
    red_first -= gp
    loc_first -= pw
    tl.debug_barrier()
    firsts = (w_first, gv_first & 0xFFFF, red_first, loc_first, gp)
    is_split, fresh, base = pf.first_works(
        (wis_ptr, rip_ptr, rfm_ptr, rpm_ptr, mark_ptr + KBLOCK),
        (vb, q_start, q_end, kvb, kv_stop, kve, last),
        (valid, kf, cont, p),
        firsts,
        (max_work, tile_cnt, pm_len),
        (num_cu, gran, page_size),
        PAGE1,
    )

    # scratch for the programs' gathers, and the program marks
    static = (vb, q_start, q_end, kvb, kv_stop, kve, last, tsize)
    ps.put_fields(scratch_ptr, stride, ps.F_VB, e, static, is_split)
    ps.put_fields(scratch_ptr, stride, ps.F_BASE, e, (base, loc_first, red_first), is_split)
    dynamic = (w_first, kf, cont, fresh.to(tl.int32))
    ps.put_fields(scratch_ptr, stride, ps.F_W, e, dynamic, is_split | fresh)
    tl.store(mark_ptr + kf + 1, e, mask=is_split & (kf + 1 < num_cu))
    tl.store(mark_ptr + kf, e, mask=fresh & (kf < num_cu))
    tl.debug_barrier()

    # ---- per program: work_indptr and the continuation fragment it starts with ---------
    kin = k < num_cu
    owner = tl.associative_scan(tl.load(mark_ptr + k, mask=kin, other=-1), 0, _max_combine)
    has = kin & (owner >= 0)
    own = tl.maximum(owner, 0)
    o_kf = _get(scratch_ptr, stride, ps.F_KF, own, has, 0)
    o_cont = _get(scratch_ptr, stride, ps.F_CONT, own, has, 0)
    o_fresh = _get(scratch_ptr, stride, ps.F_FRESH, own, has, 0)
    o_w = _get(scratch_ptr, stride, ps.F_W, own, has, 0)
    dd = k - o_kf
    starts = has & (o_fresh > 0) & (dd == 0)
    cont_here = has & (dd >= 1) & (dd <= o_cont)
    wip = tl.where(starts, o_w, tl.where(cont_here, o_w + dd, num_works))
    tl.store(wip_ptr + k, wip, mask=kin)
    tl.store(wip_ptr + num_cu, num_works)
    c_vb = _get(scratch_ptr, stride, ps.F_VB, own, cont_here, 0)
    c_qs = _get(scratch_ptr, stride, ps.F_QS, own, cont_here, 0)
    c_qe = _get(scratch_ptr, stride, ps.F_QE, own, cont_here, 0)
    c_kvb = _get(scratch_ptr, stride, ps.F_KVB, own, cont_here, 0)
    c_stop = _get(scratch_ptr, stride, ps.F_STOP, own, cont_here, 0)
    c_kve = _get(scratch_ptr, stride, ps.F_KVE, own, cont_here, 0)
    c_last = _get(scratch_ptr, stride, ps.F_LAST, own, cont_here, 1)
    c_ts = _get(scratch_ptr, stride, ps.F_TS, own, cont_here, 0)
    c_base = _get(scratch_ptr, stride, ps.F_BASE, own, cont_here, 0)
    c_loc0 = _get(scratch_ptr, stride, ps.F_LOC, own, cont_here, 0)
    c_red0 = _get(scratch_ptr, stride, ps.F_RED, own, cont_here, 0)
    c_ks = c_kvb + (c_base + (dd - 1) * d) * gran
    c_ke = tl.where(dd == o_cont, c_stop, tl.minimum(c_kvb + (c_base + dd * d) * gran, c_stop))
    c_loc = c_loc0 + dd * c_ts
    c_w = o_w + dd
    c_off = pf.kv_offset(c_ke, c_kve, c_last, page_size, PAGE1)
    here = cont_here & (c_w < max_work)
    pf.store_work(wis_ptr, c_w, here, c_vb, c_loc, c_qs, c_qe, c_ks, c_ke, c_off)
    tl.store(rpm_ptr + c_red0 + dd, c_loc, mask=cont_here & (c_red0 + dd < pm_len))

    # ---- every entry the plan does not use --------------------------------------------
    tl.store(rip_ptr, 0)
    _fill(rip_ptr, num_tiles + 1, tile_cnt + 1, num_partials, FILL_BLOCK)
    _fill(rfm_ptr, num_tiles * 2, tile_cnt * 2, -1, FILL_BLOCK)
    _fill(rpm_ptr, num_partials, pm_len, -1, FILL_BLOCK)
    _fill(wis_ptr, num_works * 8, max_work * 8, -1, FILL_BLOCK)
