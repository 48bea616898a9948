"""The two walks of AITER's v1.2 serial planner over the qo tiles of a `TileSetup`.

`walk_literal` transcribes AITER's loop fragment by fragment (kept as the readable
reference and for negative controls); `walk_fast`, the one `plan_persistent_decode` uses,
loops once per program and places every run of tiles that fits whole with one bisection
of the prefix sum of tile costs. Both return the same `WalkResult`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from conformance.errors import PlanError
from conformance.persistent.setup import TileSetup

_I64 = np.int64


@dataclass(frozen=True)
class WalkResult:
    works: np.ndarray  # (num_works, 8)
    work_indptr: np.ndarray  # (num_cu + 1,)
    group_sizes: np.ndarray  # (num_tiles,): reduce group size per tile, 0 when unsplit
    partial_map: np.ndarray  # (num_partials,)


def _left_over(i: int, s: TileSetup) -> PlanError:
    return PlanError(
        f"num_cus: {s.num_cu} programs did not take every qo tile (tile {i} of "
        f"{s.num_tiles}, virtual batch {int(s.vb[i])} left); this breaks AITER's "
        f"v1.2 budget argument"
    )


def walk_literal(s: TileSetup, *, tail_rule: bool = True) -> WalkResult:
    """AITER's serial loop, fragment by fragment. ``tail_rule=False`` drops #2106."""
    vb_l, nblk_l, kvb_l, kve_l, bt_l = (
        a.tolist() for a in (s.vb, s.num_blocks, s.kv_begin, s.kv_end, s.tail)
    )
    qs_l, qe_l, ts_l, last_l = (
        a.tolist() for a in (s.q_start, s.q_end, s.tile_size, s.last_page_len)
    )
    gran, ovh, ps, thr = s.granularity, s.overhead, s.page_size, s.tail_threshold
    page1 = ps == 1
    works: list[tuple[int, ...]] = []
    work_indptr = [0] * (s.num_cu + 1)
    group_sizes = [0] * s.num_tiles
    partial_map: list[int] = []
    i = blk = nsplit = partial_idx = 0
    tail_done = False
    for cid in range(s.num_cu):
        remain = s.payload
        while i < s.num_tiles:
            r = nblk_l[i] - blk
            ks = kvb_l[i] + blk * gran
            kve, bt, ts = kve_l[i], bt_l[i], ts_l[i]
            if remain >= r + ovh or tail_done:  # last (or only) fragment of the tile
                if page1:
                    ke = min(ks + r * gran, kve - bt)
                    if 0 < kve - ke < thr or tail_done:
                        ke = kve - bt
                    off = kve - ke
                else:
                    ke = min(ks + r * gran, kve)
                    off = 0 if ke == kve else (kve - ke - 1) * ps + last_l[i]
                loc = -1
                if nsplit:
                    loc = partial_idx
                    group_sizes[i] = nsplit + 1
                    partial_map.extend(partial_idx - (nsplit - k) * ts for k in range(nsplit + 1))
                    partial_idx += ts
                works.append((vb_l[i], loc, qs_l[i], qe_l[i], ks, ke, off, 0))
                remain -= r + ovh
                i += 1
                blk = nsplit = 0
                tail_done = False
                continue
            if remain > ovh:  # a fragment that fills this program
                c = remain - ovh
                if page1:
                    ke = min(ks + c * gran, kve - bt)
                    if tail_rule and kve - ke < thr:
                        tail_done = True  # absorb the short tail: re-loop, over budget
                        continue
                    off = kve - ke
                else:
                    ke = min(ks + c * gran, kve)
                    off = 0 if ke == kve else (kve - ke - 1) * ps + last_l[i]
                works.append((vb_l[i], partial_idx, qs_l[i], qe_l[i], ks, ke, off, 0))
                partial_idx += ts
                blk += c
                nsplit += 1
            break
        work_indptr[cid + 1] = len(works)
    if i < s.num_tiles:
        raise _left_over(i, s)
    return WalkResult(
        works=np.array(works, dtype=_I64).reshape(-1, 8),
        work_indptr=np.array(work_indptr, dtype=_I64),
        group_sizes=np.array(group_sizes, dtype=_I64),
        partial_map=np.array(partial_map, dtype=_I64),
    )


def _whole_tile_rows(s: TileSetup) -> np.ndarray:
    """The work row of every tile as one unsplit work (its kv end trimmed by the tail)."""
    rows = np.zeros((s.num_tiles, 8), dtype=_I64)
    rows[:, 0] = s.vb
    rows[:, 1] = -1
    rows[:, 2] = s.q_start
    rows[:, 3] = s.q_end
    rows[:, 4] = s.kv_begin
    rows[:, 5] = s.kv_end - s.tail  # tail is 0 unless page 1 and causal
    rows[:, 6] = s.tail
    return rows


def walk_fast(s: TileSetup) -> WalkResult:
    """The same walk, one iteration per program: runs of whole tiles go in by bisection.

    A program starts with the rest of a split tile (if any), then takes the longest run
    of tiles whose costs (blocks + overhead) fit its remaining payload, then possibly the
    first fragment of the next tile (or that whole tile, absorbing a short tail). Works
    come out in tile order, so the work list is every tile's whole-tile row repeated by
    its fragment count, with the fragment rows written over it at their work ids.
    """
    n_tiles, gran, ovh, ps, thr = (
        s.num_tiles,
        s.granularity,
        s.overhead,
        s.page_size,
        s.tail_threshold,
    )
    page1 = ps == 1
    prefix = [0, *np.cumsum(s.num_blocks + ovh).tolist()]  # cost of the tiles before i
    vb_l, nblk_l, kvb_l, kve_l, bt_l, ts_l, qs_l, qe_l, last_l = (
        a.tolist()
        for a in (
            s.vb,
            s.num_blocks,
            s.kv_begin,
            s.kv_end,
            s.tail,
            s.tile_size,
            s.q_start,
            s.q_end,
            s.last_page_len,
        )
    )
    frag_rows: list[tuple[int, ...]] = []
    frag_ids: list[int] = []
    work_indptr = [0] * (s.num_cu + 1)
    split_tiles: list[int] = []
    split_sizes: list[int] = []
    partial_map: list[int] = []
    num_works = i = blk = nsplit = partial_idx = 0

    def kv_offset(i: int, ke: int) -> int:
        kve = kve_l[i]
        if page1 or ke == kve:
            return kve - ke
        return (kve - ke - 1) * ps + last_l[i]

    for cid in range(s.num_cu):
        if i >= n_tiles:
            work_indptr[cid + 1 :] = [num_works] * (s.num_cu - cid)
            break
        remain = s.payload
        while True:
            if blk == 0 and remain > 0:  # the run of whole tiles that fits
                j = bisect_right(prefix, prefix[i] + remain, lo=i) - 1
                if j > i:
                    num_works += j - i
                    remain -= prefix[j] - prefix[i]
                    i = j
            if i >= n_tiles:
                break
            r = nblk_l[i] - blk
            ks = kvb_l[i] + blk * gran
            finish = blk > 0 and remain >= r + ovh  # the rest of a split tile fits
            if not finish:
                if remain <= ovh:  # too little left: this program is closed
                    break
                c = remain - ovh
                ke = min(ks + c * gran, kve_l[i] - bt_l[i] if page1 else kve_l[i])
                if not (page1 and kve_l[i] - ke < thr):  # a fragment filling the program
                    frag_ids.append(num_works)
                    frag_rows.append(
                        (vb_l[i], partial_idx, qs_l[i], qe_l[i], ks, ke, kv_offset(i, ke), 0)
                    )
                    num_works += 1
                    partial_idx += ts_l[i]
                    blk += c
                    nsplit += 1
                    break
                # else: absorb the short tail into this program, over budget
            if nsplit:  # last fragment of a split tile
                ts = ts_l[i]
                ke = kve_l[i] - bt_l[i] if page1 else kve_l[i]
                frag_ids.append(num_works)
                frag_rows.append(
                    (vb_l[i], partial_idx, qs_l[i], qe_l[i], ks, ke, kv_offset(i, ke), 0)
                )
                split_tiles.append(i)
                split_sizes.append(nsplit + 1)
                partial_map.extend(range(partial_idx - nsplit * ts, partial_idx + 1, ts))
                partial_idx += ts
            num_works += 1  # (an unsplit tile is its whole-tile row)
            i += 1
            blk = nsplit = 0
            if not finish:
                break
            remain -= r + ovh
        work_indptr[cid + 1] = num_works
    if i < n_tiles:
        raise _left_over(i, s)

    group_sizes = np.zeros(n_tiles, dtype=_I64)
    group_sizes[split_tiles] = split_sizes
    works = np.repeat(_whole_tile_rows(s), np.where(group_sizes > 0, group_sizes, 1), axis=0)
    if frag_rows:
        works[frag_ids] = frag_rows
    return WalkResult(
        works=works,
        work_indptr=np.array(work_indptr, dtype=_I64),
        group_sizes=group_sizes,
        partial_map=np.array(partial_map, dtype=_I64),
    )
