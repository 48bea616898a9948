"""The planner walk's snaps found all at once: a chain of tile boundaries walked by doubling.

The walk kernel (kernels/triton_planner.py) advances from one snap to the next, one round
of vector operations per snap. A batch whose programs each end on a tile boundary (tiles
about one payload long: short contexts, many requests) snaps at every program, so the
rounds run one per program, serially. Every snap lands on a tile boundary, and where the
walk goes from a boundary depends on that boundary alone, so `chain_walk` computes, for
every boundary at once, the next snap (`round_keys` over the ``WINDOW`` tiles that follow
it), then follows the chain from boundary 0 by pointer doubling (``LEVELS`` steps, each
joining the boundaries reached so far to those reached 2**k snaps later) and derives every
tile's and program's part from the snap that precedes it. The walk kernel tries the chain
only when boundary 0's own next snap, which its first round finds, lies within the window
(`boundary0_known`): a batch that fails there costs no more than its rounds.
A boundary whose next snap lies beyond its window is unknown; when the chain reaches one,
`chain_walk` reports failure and the kernel walks by rounds instead. Both give the same plan.

The chain buffer holds `CHAIN_FIELDS` int32 fields of one entry per (virtual batch, tile),
field-major like the setup's scratch.
"""

from __future__ import annotations

import triton
import triton.language as tl

C_QP = tl.constexpr(0)  # P_i // d and P_i % d (P: prefix sum of tile costs, d: payload step)
C_RP = tl.constexpr(1)
C_QPE = tl.constexpr(2)  # the same of P_{i+1}
C_RPE = tl.constexpr(3)
C_QTAU = tl.constexpr(4)  # the same of P_i + tau (page 1)
C_RTAU = tl.constexpr(5)
C_VALID = tl.constexpr(6)
C_NEXT = tl.constexpr(7)  # the boundary 2**k snaps later (-1: the end), then scratch
C_PROGS = tl.constexpr(8)  # programs taken by those snaps
C_SEEN = tl.constexpr(9)  # reached from boundary 0
C_START = tl.constexpr(10)  # the program that starts there
C_RSTAR = tl.constexpr(11)  # programs before the next snap, minus one
C_SNAP = tl.constexpr(12)  # the next snap's position
CHAIN_FIELDS = tl.constexpr(13)


@triton.jit
def floor_diff(qx, rx, qy, ry):
    """floor((X - Y) / d) from X = qx * d + rx and Y = qy * d + ry (0 <= r < d)."""
    return qx - qy - (rx < ry).to(tl.int32)


@triton.jit
def round_keys(a, o, d, big, q_p, r_p, q_pe, r_pe, q_tau, r_tau, valid, PAGE1: tl.constexpr):
    """Programs start at ``a + k * d``: per tile, (q_b, r_b, r_lo, r_hi, has_t, key).

    ``r_lo``/``r_hi``: the first and last step ``k`` whose program ends in the tile
    (``has_t``: one does); ``key``: (the step of its first snap, capped at ``big``) << 32
    | the position it snaps to. ``q_b``/``r_b``: ``a + o + 1`` divided by ``d``.
    """
    bl = a + o + 1
    q_b = bl // d
    r_b = bl - q_b * d
    r_lo = tl.maximum(floor_diff(q_p, r_p, q_b, r_b), 0)
    r_hi = floor_diff(q_pe, r_pe, q_b, r_b) - 1
    has_t = valid & (r_lo <= r_hi)
    t_lo = a + o + (tl.minimum(r_lo, big) + 1) * d
    pj = q_p * d + r_p
    waste = has_t & (t_lo - pj <= o)
    r_ev = tl.where(waste, r_lo, big)
    if PAGE1:
        r_abs = tl.maximum(floor_diff(q_tau, r_tau, q_b, r_b), r_lo)
        r_ev = tl.where(has_t & (~waste) & (r_abs <= r_hi), r_abs, r_ev)
    snap_p = tl.where(waste, pj, q_pe * d + r_pe)
    key = (tl.minimum(r_ev, big).to(tl.int64) << 32) | snap_p.to(tl.int64)
    return q_b, r_b, r_lo, r_hi, has_t, key


@triton.jit
def _field(chain_ptr, stride, field, idx, mask, other):
    return tl.load(chain_ptr + field * stride + idx, mask=mask, other=other)


@triton.jit
def _put(chain_ptr, stride, field, idx, value, mask):
    tl.store(chain_ptr + field * stride + idx, value, mask=mask)


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _split_key(best):
    r64 = best >> 32
    return r64.to(tl.int32), (best - (r64 << 32)).to(tl.int32)


@triton.jit
def next_snaps(chain_ptr, stride, j, scalars, PAGE1: tl.constexpr, WINDOW: tl.constexpr):
    """Per boundary ``j`` (a vector): (P_j, r_star, snap, known, nxt, progs).

    Its next snap from the ``WINDOW`` tiles that follow it: ``r_star`` programs before it
    (minus one), the position ``snap``, the boundary ``nxt`` there (-1: the end) and the
    programs ``progs`` taken; ``known``: no snap lies beyond the window before it.
    """
    o, d, p_total, num_cu = scalars
    big = num_cu + 1
    jin = j < stride
    p = _field(chain_ptr, stride, C_QP, j, jin, 0) * d + _field(chain_ptr, stride, C_RP, j, jin, 0)
    jj = j[:, None] + tl.arange(0, WINDOW)[None, :]
    inw = jj < stride
    w_qp = _field(chain_ptr, stride, C_QP, jj, inw, 0)
    w_rp = _field(chain_ptr, stride, C_RP, jj, inw, 0)
    w_qpe = _field(chain_ptr, stride, C_QPE, jj, inw, 0)
    w_rpe = _field(chain_ptr, stride, C_RPE, jj, inw, 0)
    w_qtau = _field(chain_ptr, stride, C_QTAU, jj, inw, 0)
    w_rtau = _field(chain_ptr, stride, C_RTAU, jj, inw, 0)
    w_valid = _field(chain_ptr, stride, C_VALID, jj, inw, 0) != 0
    a2 = p[:, None]
    keys = round_keys(a2, o, d, big, w_qp, w_rp, w_qpe, w_rpe, w_qtau, w_rtau, w_valid, PAGE1)[5]
    bl = p + o + 1
    q_b = bl // d
    r_b = bl - q_b * d
    q_n = p_total // d
    r_n = p_total - q_n * d
    r_end = tl.maximum(floor_diff(q_n, r_n, q_b, r_b), 0)
    key_end = (tl.minimum(r_end, big).to(tl.int64) << 32) | p_total.to(tl.int64)
    r_star, snap = _split_key(tl.minimum(tl.min(keys, axis=1), key_end))
    jw = j + WINDOW  # the first boundary past the window: no snap beyond before its step
    q_w = _field(chain_ptr, stride, C_QP, jw, jw < stride, 0)
    r_w = _field(chain_ptr, stride, C_RP, jw, jw < stride, 0)
    known = (jw >= stride) | (r_star < tl.maximum(floor_diff(q_w, r_w, q_b, r_b), 0))
    before = tl.sum((inw & (w_qp * d + w_rp < snap[:, None])).to(tl.int32), axis=1)
    nxt = tl.where(snap >= p_total, -1, tl.where(known, j + before, j))
    progs = tl.where(known, r_star + 1, 0)
    return p, r_star, snap, known, nxt, progs


@triton.jit
def boundary0_known(r_star, p_w, o, d, stride, WINDOW: tl.constexpr):
    """Whether boundary 0's next snap lies within the ``WINDOW`` tiles after it, as
    `chain_walk` judges every boundary, from the walk's first round (``r_star``: its
    programs before the snap, minus one) and ``p_w`` = P_WINDOW: no window built."""
    bl = o + 1
    q_b = bl // d
    q_w = p_w // d
    past = tl.maximum(floor_diff(q_w, p_w - q_w * d, q_b, bl - q_b * d), 0)
    return (stride <= WINDOW) | (r_star < past)


@triton.jit
def chain_walk(
    ptrs,
    stride,
    tiles,
    scalars,
    PAGE1: tl.constexpr,
    BLOCK: tl.constexpr,
    KBLOCK: tl.constexpr,
    WINDOW: tl.constexpr,
    LEVELS: tl.constexpr,
):
    """(ok, kf, cont, y, left) of the walk, as the rounds give them, when ``ok``.

    ``ptrs`` = (chain_ptr, mark_ptr), ``tiles`` = (q_p, r_p, q_pe, r_pe, q_tau, r_tau,
    valid, program lanes) per entry, ``scalars`` = (o, d, num_cu, P_total // d,
    P_total % d, P_total), as the walk's rounds take them. The walk kernel calls it only
    when `boundary0_known`. Uses ``mark_ptr[0:KBLOCK]`` as scratch (the caller rewrites it).
    """
    chain_ptr, mark_ptr = ptrs
    q_p, r_p, q_pe, r_pe, q_tau, r_tau, valid, k = tiles
    quotients = (q_p, r_p, q_pe, r_pe, q_tau, r_tau)
    o, d, num_cu, _, _, p_total = scalars
    big = num_cu + 1
    e = tl.arange(0, BLOCK)
    ein = e < stride
    for i in tl.static_range(len(quotients)):
        _put(chain_ptr, stride, C_QP + i, e, quotients[i], ein)
    _put(chain_ptr, stride, C_VALID, e, valid.to(tl.int32), ein)
    tl.debug_barrier()

    # ---- every boundary's next snap, from the WINDOW tiles that follow it ---------------
    window_scalars = (o, d, p_total, num_cu)
    p, r_star, snap, known, nxt, progs = next_snaps(
        chain_ptr, stride, e, window_scalars, PAGE1, WINDOW
    )
    _put(chain_ptr, stride, C_RSTAR, e, r_star, ein)
    _put(chain_ptr, stride, C_SNAP, e, snap, ein)

    # ---- the chain from boundary 0: after level k, every boundary 2**(k+1) - 1 snaps on
    seen = (e == 0).to(tl.int32)
    start = tl.zeros([BLOCK], tl.int32)
    for _ in range(LEVELS):
        tl.debug_barrier()
        _put(chain_ptr, stride, C_NEXT, e, nxt, ein)
        _put(chain_ptr, stride, C_PROGS, e, progs, ein)
        _put(chain_ptr, stride, C_SEEN, e, seen, ein)
        _put(chain_ptr, stride, C_START, e, start, ein)
        tl.debug_barrier()
        jump = ein & (seen != 0) & (nxt >= 0)
        _put(chain_ptr, stride, C_SEEN, nxt, tl.full([BLOCK], 1, tl.int32), jump)
        _put(chain_ptr, stride, C_START, nxt, start + progs, jump)
        far = ein & (nxt >= 0)
        nxt2 = _field(chain_ptr, stride, C_NEXT, nxt, far, -1)
        progs2 = _field(chain_ptr, stride, C_PROGS, nxt, far, 0)
        tl.debug_barrier()
        seen = _field(chain_ptr, stride, C_SEEN, e, ein, 0)
        start = _field(chain_ptr, stride, C_START, e, ein, 0)
        nxt = tl.where(nxt >= 0, nxt2, -1)
        progs = progs + progs2
    real = ein & (seen != 0) & (start < num_cu) & (p < p_total)
    ok = tl.max((real & ~known).to(tl.int32), axis=0) == 0
    last = real & ((start + r_star + 1 >= num_cu) | (snap >= p_total))
    left_any = (real & (r_star >= num_cu - start)) | (last & (snap < p_total))
    left = tl.max(left_any.to(tl.int32), axis=0)
    left |= ((tl.max(real.to(tl.int32), axis=0) == 0) & (p_total > 0)).to(tl.int32)
    _put(chain_ptr, stride, C_START, e, start, ein)
    tl.debug_barrier()

    # ---- per tile: the snap before it gives its first program and fragments -------------
    owner = tl.associative_scan(tl.where(real, e, -1), 0, _max_combine)
    has = ein & (owner >= 0)
    own = tl.maximum(owner, 0)
    s_o = _field(chain_ptr, stride, C_START, own, has, 0)
    rs_o = _field(chain_ptr, stride, C_RSTAR, own, has, 0)
    snap_o = _field(chain_ptr, stride, C_SNAP, own, has, 0)
    q_a = _field(chain_ptr, stride, C_QP, own, has, 0)
    r_a = _field(chain_ptr, stride, C_RP, own, has, 0)
    a_o = q_a * d + r_a
    _, _, r_lo, r_hi, has_t, _ = round_keys(
        a_o, o, d, big, q_p, r_p, q_pe, r_pe, q_tau, r_tau, valid, PAGE1
    )
    here = has & valid & (p >= a_o) & (p < snap_o)
    kf = tl.where(here, s_o + tl.minimum(floor_diff(q_p, r_p, q_a, r_a), rs_o), 0)
    split = has & has_t & (r_lo < rs_o)
    cont = tl.where(split, tl.minimum(r_hi, rs_o - 1) - r_lo + 1, 0)

    # ---- per program: where it starts --------------------------------------------------
    tl.store(mark_ptr + k, tl.full([KBLOCK], -1, tl.int32))
    tl.debug_barrier()
    tl.store(mark_ptr + start, e, mask=real)
    tl.debug_barrier()
    pown = tl.associative_scan(tl.load(mark_ptr + k), 0, _max_combine)
    phas = pown >= 0
    pw = tl.maximum(pown, 0)
    s_k = _field(chain_ptr, stride, C_START, pw, phas, 0)
    rs_k = _field(chain_ptr, stride, C_RSTAR, pw, phas, 0)
    snap_k = _field(chain_ptr, stride, C_SNAP, pw, phas, 0)
    a_k = _field(chain_ptr, stride, C_QP, pw, phas, 0) * d
    a_k += _field(chain_ptr, stride, C_RP, pw, phas, 0)
    y = tl.where(phas & (k - s_k <= rs_k), a_k + (k - s_k) * d, 0)
    y = tl.where(phas & (k - s_k == rs_k + 1), snap_k, y)
    tl.debug_barrier()
    return ok, kf, cont, y, left
