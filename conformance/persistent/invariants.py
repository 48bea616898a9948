"""Invariants every persistent-decode plan must satisfy (research note §2.9, I1-I11).

`check_plan` works on any backend's `WorkPlan` (AITER's buffers wrapped in one, the
reference planner's, a foreign backend's) and returns every violation it finds;
`assert_plan_invariants` raises `PlanError` listing them.

- I1  ``work_indptr``: starts at 0, non-decreasing, ends at ``num_works`` which fits
      ``work_info_set``, one entry per program plus one; every row's padding is 0.
- I2  (budget) programs with work form a prefix no longer than ``num_splits``.
- I3  per virtual batch, the qo tiles partition its q rows.
- I4  per tile, the works' kv ranges are non-empty, ascending and contiguous and cover
      ``[kv_begin, kv_end - tail)``; ``tail`` is 0 unless causal with page 1, and never
      more than the tokens the tile's last q row cannot see.
- I5  ``kv_offset`` is the number of this batch's kv tokens after ``kv_end``.
- I6  a tile has one work iff its ``partial_qo_loc`` is -1; a split tile's works have
      distinct locs >= 0 and consecutive work ids.
- I7  ``reduce_indptr``: from 0, non-decreasing, groups of size 0 or 2..num programs,
      padded with the total past the last tile, total == ``num_partials``.
- I8  ``reduce_partial_map[:total]`` lists each split tile's locs in kv order, in one
      group; partial rows are pairwise disjoint and inside the partial buffer.
- I9  ``reduce_final_map[group] == (qo_start, qo_end)`` of the group's tile.
- I10 (page 1, causal) every q row of a work sees at least one of its kv tokens (#2106).
- I11 (budget) each program's blocks plus overhead stay within the payload, except one
      absorbed tail of at most ``ceil((max_seqlen_qo - 1) / kv_granularity)`` blocks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

from conformance.errors import PlanError
from conformance.persistent.plan import WorkInfo, WorkPlan
from conformance.persistent.profiles import PROFILES


@dataclass(frozen=True)
class PlanViolation:
    """One broken invariant: its id, where (work and/or tile), the fields, and the values."""

    invariant: str
    message: str
    work: int | None = None
    tile: int | None = None
    fields: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = []
        if self.work is not None:
            where.append(f"work {self.work}")
        if self.tile is not None:
            where.append(f"tile {self.tile}")
        loc = f" [{', '.join(where)}]" if where else ""
        fields = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"{self.invariant}{loc}{fields}: {self.message}"


@dataclass
class _Tile:
    """Works sharing one (virtual batch, qo range), in work-id order."""

    index: int
    batch: int
    qo_start: int
    qo_end: int
    works: list[int]


def _ints(value: Any) -> list[int]:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").reshape(-1).tolist()
    return [int(v) for v in value]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Checker:
    """State shared by the per-invariant checks of one plan."""

    def __init__(
        self,
        plan: WorkPlan,
        *,
        qo: list[int],
        kv: list[int],
        last: list[int],
        page_size: int,
        causal: bool,
        max_seqlen_qo: int,
        uni_seqlen_qo: int | None,
        kv_granularity: int | None,
        max_split_per_batch: int | None,
        num_cus: int | None,
        check_budget: bool,
    ) -> None:
        self.plan = plan
        self.out: list[PlanViolation] = []
        self.page_size = page_size
        self.causal = causal
        self.max_sq = max_seqlen_qo
        self.gran = kv_granularity
        self.msb = max_split_per_batch
        self.num_cus = num_cus
        self.check_budget = check_budget
        self.ratio = max(1, plan.fold_ratio)
        self.batch = len(kv) - 1
        self.num_vb = self.batch * self.ratio
        self.kv, self.last = kv, last
        if self.ratio > 1:
            uni = uni_seqlen_qo if uni_seqlen_qo and uni_seqlen_qo > 0 else qo[1] - qo[0]
            self.q_begin = [uni * v for v in range(self.num_vb)]
            self.q_end = [uni * (v + 1) for v in range(self.num_vb)]
        else:
            self.q_begin, self.q_end = qo[:-1], qo[1:]
        self.wip = _ints(plan.work_indptr)
        self.num_cu = len(self.wip) - 1
        rows = min(max(plan.num_works, 0), plan.work_info_set.shape[0])
        self.works = [WorkInfo(*r) for r in plan.work_info_set[:rows].tolist()]
        self.tiles: list[_Tile] = []
        self.tile_of: dict[int, _Tile] = {}

    def add(
        self,
        invariant: str,
        message: str,
        *,
        work: int | None = None,
        tile: int | None = None,
        fields: tuple[str, ...] = (),
    ) -> None:
        self.out.append(PlanViolation(invariant, message, work, tile, fields))

    # -- helpers ---------------------------------------------------------------------
    def kv_range(self, vb: int) -> tuple[int, int]:
        b = vb // self.ratio
        return self.kv[b], self.kv[b + 1]

    def kv_tokens_after(self, vb: int, kv_end: int) -> int:
        _, end = self.kv_range(vb)
        if self.page_size == 1:
            return end - kv_end
        if kv_end == end:
            return 0
        return (end - kv_end - 1) * self.page_size + self.last[vb // self.ratio]

    def max_tail(self, tile: _Tile) -> int:
        """Tokens the tile's last q row cannot see (the most a plan may trim)."""
        if not (self.causal and self.page_size == 1):
            return 0
        return max(self.q_end[tile.batch] - tile.qo_end, 0)

    def is_last_of_tile(self, w: int) -> bool:
        tile = self.tile_of.get(w)
        return tile is not None and tile.works[-1] == w

    # -- I1 --------------------------------------------------------------------------
    def check_work_indptr(self) -> None:
        wip, plan = self.wip, self.plan
        if len(wip) < 2:
            self.add(
                "I1", f"work_indptr has {len(wip)} entries, expected >= 2", fields=("work_indptr",)
            )
            return
        if wip[0] != 0:
            self.add("I1", f"work_indptr[0]={wip[0]}, expected 0", fields=("work_indptr",))
        for c in range(self.num_cu):
            if wip[c + 1] < wip[c]:
                self.add(
                    "I1",
                    f"work_indptr decreases at program {c}: {wip[c]} -> {wip[c + 1]}",
                    fields=("work_indptr",),
                )
        if wip[-1] != plan.num_works:
            self.add(
                "I1",
                f"work_indptr[-1]={wip[-1]} but num_works={plan.num_works}",
                fields=("work_indptr", "num_works"),
            )
        if plan.num_works > plan.work_info_set.shape[0]:
            self.add(
                "I1",
                f"num_works={plan.num_works} exceeds work_info_set rows "
                f"{plan.work_info_set.shape[0]}",
                fields=("num_works", "work_info_set"),
            )
        if self.num_cus is not None:
            arch = self.plan.params.get("arch")
            occupancy = PROFILES[arch].occupancy if arch in PROFILES else 1
            if self.num_cu != self.num_cus * occupancy:
                self.add(
                    "I1",
                    f"work_indptr has {len(wip)} entries, expected num_cus*"
                    f"occupancy+1={self.num_cus * occupancy + 1}",
                    fields=("work_indptr",),
                )
        for w, info in enumerate(self.works):
            if info.padding != 0:
                self.add("I1", f"padding={info.padding}, expected 0", work=w, fields=("padding",))

    # -- tiles and I3 ----------------------------------------------------------------
    def collect_tiles(self) -> None:
        by_key: dict[tuple[int, int, int], _Tile] = {}
        for w, info in enumerate(self.works):
            if not 0 <= info.batch_idx < self.num_vb:
                self.add(
                    "I3",
                    f"batch_idx={info.batch_idx} outside 0..{self.num_vb - 1} "
                    f"({self.batch} batches x fold ratio {self.ratio})",
                    work=w,
                    fields=("batch_idx",),
                )
                continue
            key = (info.batch_idx, info.qo_start, info.qo_end)
            tile = by_key.get(key)
            if tile is None:
                tile = _Tile(len(self.tiles), *key, works=[])
                by_key[key] = tile
                self.tiles.append(tile)
            tile.works.append(w)
            self.tile_of[w] = tile

    def check_qo_partition(self) -> None:
        per_batch: dict[int, list[_Tile]] = {}
        for tile in self.tiles:
            per_batch.setdefault(tile.batch, []).append(tile)
        for vb in range(self.num_vb):
            tiles = sorted(per_batch.get(vb, []), key=lambda t: (t.qo_start, t.qo_end))
            begin, end = self.q_begin[vb], self.q_end[vb]
            if not tiles:
                self.add(
                    "I3",
                    f"virtual batch {vb} (q rows [{begin},{end})) has no work",
                    fields=("batch_idx",),
                )
                continue
            cursor = begin
            for tile in tiles:
                w = tile.works[0]
                if tile.qo_start >= tile.qo_end:
                    self.add(
                        "I3",
                        f"empty q range [{tile.qo_start},{tile.qo_end})",
                        work=w,
                        tile=tile.index,
                        fields=("qo_start", "qo_end"),
                    )
                if tile.qo_start != cursor:
                    what = "overlaps" if tile.qo_start < cursor else "leaves a gap after"
                    self.add(
                        "I3",
                        f"batch {vb}: q range [{tile.qo_start},{tile.qo_end}) "
                        f"{what} row {cursor} (batch rows [{begin},{end}))",
                        work=w,
                        tile=tile.index,
                        fields=("qo_start",),
                    )
                cursor = max(cursor, tile.qo_end)
            if cursor != end:
                self.add(
                    "I3",
                    f"batch {vb}: tiles end at q row {cursor}, batch rows are [{begin},{end})",
                    work=tiles[-1].works[-1],
                    tile=tiles[-1].index,
                    fields=("qo_end",),
                )

    # -- I4, I5, I6, I10 -------------------------------------------------------------
    def check_kv_coverage(self) -> None:
        for tile in self.tiles:
            begin, end = self.kv_range(tile.batch)
            tail_max = self.max_tail(tile)
            cursor = begin
            for i, w in enumerate(tile.works):
                info = self.works[w]
                ks, ke = info.kv_start, info.kv_end
                if ks != cursor:
                    if i == 0:
                        msg = f"first kv_start={ks}, batch kv starts at {begin}"
                    elif ks < cursor:
                        msg = f"kv [{ks},{ke}) overlaps the previous fragment ending at {cursor}"
                    else:
                        msg = (
                            f"kv [{ks},{ke}) leaves kv [{cursor},{ks}) uncovered after "
                            f"the previous fragment"
                        )
                    self.add("I4", msg, work=w, tile=tile.index, fields=("kv_start",))
                empty_batch = end - begin == 0
                if ke < ks or (ke == ks and not empty_batch):
                    self.add(
                        "I4",
                        f"empty or reversed kv range [{ks},{ke}) in a batch with "
                        f"kv [{begin},{end})",
                        work=w,
                        tile=tile.index,
                        fields=("kv_start", "kv_end"),
                    )
                cursor = max(cursor, ke)
            last_end = self.works[tile.works[-1]].kv_end
            trimmed = end - last_end
            if not 0 <= trimmed <= tail_max:
                self.add(
                    "I4",
                    f"tile's kv ends at {last_end}; expected {end} minus a causal "
                    f"trim of 0..{tail_max} (batch kv [{begin},{end}), q rows "
                    f"[{tile.qo_start},{tile.qo_end}) of [{self.q_begin[tile.batch]},"
                    f"{self.q_end[tile.batch]}))",
                    work=tile.works[-1],
                    tile=tile.index,
                    fields=("kv_end",),
                )

    def check_kv_offset(self) -> None:
        for w, info in enumerate(self.works):
            if w not in self.tile_of:
                continue
            expected = self.kv_tokens_after(info.batch_idx, info.kv_end)
            if info.kv_offset != expected:
                self.add(
                    "I5",
                    f"kv_offset={info.kv_offset}, expected {expected} kv tokens "
                    f"after kv_end={info.kv_end} (batch kv pages "
                    f"{list(self.kv_range(info.batch_idx))}, page_size={self.page_size})",
                    work=w,
                    tile=self.tile_of[w].index,
                    fields=("kv_offset",),
                )

    def check_split_locs(self) -> None:
        for tile in self.tiles:
            locs = [self.works[w].partial_qo_loc for w in tile.works]
            if len(tile.works) == 1:
                if locs[0] != -1:
                    self.add(
                        "I6",
                        f"unsplit tile has partial_qo_loc={locs[0]}, expected -1",
                        work=tile.works[0],
                        tile=tile.index,
                        fields=("partial_qo_loc",),
                    )
                continue
            for w, loc in zip(tile.works, locs, strict=True):
                if loc < 0:
                    self.add(
                        "I6",
                        f"tile split into {len(tile.works)} works but partial_qo_loc={loc}",
                        work=w,
                        tile=tile.index,
                        fields=("partial_qo_loc",),
                    )
            dupes = sorted(loc for loc, n in Counter(locs).items() if n > 1)
            if dupes:
                self.add(
                    "I6",
                    f"split tile's works share partial_qo_loc {dupes}",
                    work=tile.works[0],
                    tile=tile.index,
                    fields=("partial_qo_loc",),
                )
            first = tile.works[0]
            if tile.works != list(range(first, first + len(tile.works))):
                self.add(
                    "I6",
                    f"split tile's works {tile.works} are not consecutive work ids",
                    work=first,
                    tile=tile.index,
                    fields=("batch_idx",),
                )

    def check_masked_rows(self) -> None:
        if not (self.causal and self.page_size == 1):
            return
        for w, info in enumerate(self.works):
            tile = self.tile_of.get(w)
            if tile is None or info.kv_end <= info.kv_start:
                continue
            _, end = self.kv_range(tile.batch)
            unseen = self.q_end[tile.batch] - 1 - info.qo_start  # rows after the first one
            visible_end = end - unseen
            if info.kv_start >= visible_end:
                self.add(
                    "I10",
                    f"q row {info.qo_start} sees kv tokens before {visible_end} "
                    f"only, none of this work's kv [{info.kv_start},{info.kv_end}): it is "
                    f"fully masked (kv tail shorter than max_seqlen_qo={self.max_sq}, "
                    f"#2106)",
                    work=w,
                    tile=tile.index,
                    fields=("kv_start", "kv_end"),
                )

    # -- I7, I8, I9 ------------------------------------------------------------------
    def check_reduce(self) -> None:
        plan = self.plan
        ind = _ints(plan.reduce_indptr)
        tile_cnt = len(ind) - 1
        final_map = plan.reduce_final_map.tolist()
        pmap = _ints(plan.reduce_partial_map)
        n_tiles = len(self.tiles)
        if len(final_map) != tile_cnt:
            self.add(
                "I7",
                f"reduce_final_map has {len(final_map)} rows, reduce_indptr "
                f"{len(ind)} entries (expected rows + 1)",
                fields=("reduce_indptr", "reduce_final_map"),
            )
        if n_tiles > tile_cnt:
            self.add(
                "I7",
                f"{n_tiles} qo tiles but reduce_indptr sized for {tile_cnt}",
                fields=("reduce_indptr",),
            )
        if plan.num_tiles != n_tiles:
            self.add(
                "I7",
                f"num_tiles={plan.num_tiles} but the works form {n_tiles} tiles",
                fields=("num_tiles",),
            )
        if not ind or ind[0] != 0:
            self.add(
                "I7",
                f"reduce_indptr[0]={ind[0] if ind else None}, expected 0",
                tile=0,
                fields=("reduce_indptr",),
            )
        total = ind[min(n_tiles, tile_cnt)] if ind else 0
        for t in range(tile_cnt):
            size = ind[t + 1] - ind[t]
            if size < 0:
                self.add(
                    "I7",
                    f"reduce_indptr decreases: [{t}]={ind[t]} > [{t + 1}]={ind[t + 1]}",
                    tile=t,
                    fields=("reduce_indptr",),
                )
            elif size == 1 or size > self.num_cu:
                self.add(
                    "I7",
                    f"reduce group of size {size} (reduce_indptr[{t}]={ind[t]}, "
                    f"[{t + 1}]={ind[t + 1]}); expected 0 or 2..{self.num_cu}",
                    tile=t,
                    fields=("reduce_indptr",),
                )
        for i in range(n_tiles + 1, len(ind)):
            if ind[i] != total:
                self.add(
                    "I7",
                    f"reduce_indptr[{i}]={ind[i]} past the last tile, expected the total {total}",
                    fields=("reduce_indptr",),
                )
                break
        if total != plan.num_partials:
            self.add(
                "I7",
                f"reduce total {total} != num_partials={plan.num_partials}",
                fields=("reduce_indptr", "num_partials"),
            )
        if total > len(pmap):
            self.add(
                "I8",
                f"reduce total {total} exceeds reduce_partial_map size {len(pmap)}",
                fields=("reduce_partial_map",),
            )
            return
        self._check_partials(ind, pmap[:total], final_map, tile_cnt, len(pmap))

    def _check_partials(
        self,
        ind: list[int],
        entries: list[int],
        final_map: list[list[int]],
        tile_cnt: int,
        pmap_len: int,
    ) -> None:
        split_works = [w for t in self.tiles if len(t.works) > 1 for w in t.works]
        locs = Counter(self.works[w].partial_qo_loc for w in split_works)
        if Counter(entries) != locs:
            missing = sorted((locs - Counter(entries)).elements())
            extra = sorted((Counter(entries) - locs).elements())
            self.add(
                "I8",
                f"reduce_partial_map[:total] differs from the split works' locs: "
                f"missing {missing}, unexpected {extra}",
                fields=("reduce_partial_map",),
            )
        # Partial rows: disjoint and inside the buffer.
        limit = pmap_len * self.max_sq
        spans = sorted(
            (
                self.works[w].partial_qo_loc,
                self.works[w].partial_qo_loc + self.works[w].qo_end - self.works[w].qo_start,
                w,
            )
            for w in split_works
        )
        reach, reach_work = -1, -1  # furthest row end so far and its work
        for start, stop, w in spans:
            if start < reach:
                self.add(
                    "I8",
                    f"partial rows [{start},{stop}) overlap the rows of work {reach_work}, "
                    f"which end at {reach}",
                    work=w,
                    fields=("partial_qo_loc",),
                )
            if stop > reach:
                reach, reach_work = stop, w
        for s, e, w in spans:
            if s < 0 or e > limit:
                self.add(
                    "I8",
                    f"partial rows [{s},{e}) outside the partial buffer "
                    f"[0,{limit}) (reduce_partial_map size {pmap_len} x max_seqlen_qo "
                    f"{self.max_sq})",
                    work=w,
                    fields=("partial_qo_loc",),
                )
        # Each split tile is exactly one group, locs in kv (work) order; final map rows.
        work_of_loc = {self.works[w].partial_qo_loc: w for w in split_works}
        grouped: Counter[int] = Counter()
        for t in range(min(len(ind) - 1, tile_cnt)):
            group = entries[ind[t] : ind[t + 1]] if 0 <= ind[t] <= ind[t + 1] else []
            if len(group) < 2:
                continue
            members = [work_of_loc.get(loc) for loc in group]
            tiles = {self.tile_of[w].index for w in members if w is not None}
            if None in members or len(tiles) != 1:
                self.add(
                    "I8",
                    f"reduce group {t} locs {group} do not all belong to one split tile",
                    tile=t,
                    fields=("reduce_partial_map",),
                )
                continue
            tile = self.tiles[tiles.pop()]
            grouped[tile.index] += 1
            expected = [self.works[w].partial_qo_loc for w in tile.works]
            if group != expected:
                self.add(
                    "I8",
                    f"reduce group {t} lists locs {group}, expected the tile's locs "
                    f"in kv order {expected}",
                    tile=t,
                    fields=("reduce_partial_map",),
                )
            want = [tile.qo_start, tile.qo_end]
            if t < len(final_map) and final_map[t] != want:
                self.add(
                    "I9",
                    f"reduce_final_map[{t}]={final_map[t]}, expected (qo_start, "
                    f"qo_end)={want} of its split tile",
                    tile=t,
                    fields=("reduce_final_map",),
                )
        for tile in self.tiles:
            if len(tile.works) > 1 and grouped[tile.index] != 1:
                self.add(
                    "I8",
                    f"split tile (batch {tile.batch}, q [{tile.qo_start},"
                    f"{tile.qo_end})) is in {grouped[tile.index]} reduce groups, "
                    f"expected 1",
                    work=tile.works[0],
                    tile=tile.index,
                    fields=("reduce_indptr", "reduce_partial_map"),
                )

    # -- I2, I11 ---------------------------------------------------------------------
    def check_budget_bounds(self) -> None:
        if not self.check_budget or self.gran is None or self.msb is None or not self.tiles:
            return
        gran, overhead = self.gran, max(1, _ceil_div(16, self.page_size))
        num_splits = self.num_cu if self.msb < 0 else min(self.num_cu, self.msb * self.num_vb)
        if num_splits < 1:
            return
        blocks = {}
        for tile in self.tiles:
            begin, end = self.kv_range(tile.batch)
            blocks[tile.index] = _ceil_div(end - begin, gran)
        payload = _ceil_div(sum(b + overhead for b in blocks.values()), num_splits) + overhead
        slack = _ceil_div(self.max_sq - 1, gran)
        busy = [c for c in range(self.num_cu) if self.wip[c + 1] > self.wip[c]]
        if busy and busy != list(range(len(busy))):
            idle = next(c for c in range(len(busy)) if c not in busy)
            self.add(
                "I2",
                f"program {idle} has no work but program {busy[-1]} has: busy programs are "
                f"not a prefix",
                fields=("work_indptr",),
            )
        if len(busy) > num_splits:
            self.add(
                "I2",
                f"{len(busy)} programs have work, more than num_splits={num_splits}",
                fields=("work_indptr",),
            )
        for c in busy:
            cost = 0
            for w in range(self.wip[c], min(self.wip[c + 1], len(self.works))):
                tile = self.tile_of.get(w)
                if tile is None:
                    continue
                info = self.works[w]
                _, end = self.kv_range(tile.batch)
                stop = end if self.is_last_of_tile(w) else info.kv_end
                cost += _ceil_div(stop - info.kv_start, gran) + overhead
            if cost > payload + slack:
                self.add(
                    "I11",
                    f"program {c} holds {cost} blocks incl. overhead, over the "
                    f"payload {payload} plus a tail allowance of {slack}",
                    work=self.wip[c],
                    fields=("work_indptr", "kv_start", "kv_end"),
                )


def check_plan(
    plan: WorkPlan,
    *,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    page_size: int,
    causal: bool,
    max_seqlen_qo: int | None = None,
    uni_seqlen_qo: int | None = None,
    kv_granularity: int | None = None,
    max_split_per_batch: int | None = None,
    num_cus: int | None = None,
    check_budget: bool = True,
) -> list[PlanViolation]:
    """Every violation of I1-I11 in ``plan`` for the given batch (empty when conforming).

    ``max_seqlen_qo`` defaults to ``plan.max_seqlen_qo``; ``uni_seqlen_qo``,
    ``kv_granularity``, ``max_split_per_batch`` and ``num_cus`` default to
    ``plan.params``. The budget invariants (I2 bound, I11) are the v1.2 scheduler's and
    are checked when ``check_budget`` and the granularity and split cap are known; pass
    ``check_budget=False`` for a backend with a different scheduler.
    """
    params = plan.params

    def pick(value: Any, key: str) -> Any:
        return value if value is not None else params.get(key)

    qo, kv, last = _ints(qo_indptr), _ints(kv_indptr), _ints(kv_last_page_lens)
    if len(kv) < 2 or len(qo) != len(kv) or len(last) != len(kv) - 1:
        raise PlanError(
            f"kv_indptr: check_plan needs qo_indptr and kv_indptr of one length >= 2 and "
            f"kv_last_page_lens one shorter; found lengths {len(qo)}, {len(kv)}, {len(last)}"
        )
    checker = _Checker(
        plan,
        qo=qo,
        kv=kv,
        last=last,
        page_size=page_size,
        causal=bool(causal),
        max_seqlen_qo=max_seqlen_qo if max_seqlen_qo is not None else plan.max_seqlen_qo,
        uni_seqlen_qo=pick(uni_seqlen_qo, "uni_seqlen_qo"),
        kv_granularity=pick(kv_granularity, "kv_granularity"),
        max_split_per_batch=pick(max_split_per_batch, "max_split_per_batch"),
        num_cus=pick(num_cus, "num_cus"),
        check_budget=check_budget,
    )
    checker.check_work_indptr()
    checker.collect_tiles()
    checker.check_qo_partition()
    checker.check_kv_coverage()
    checker.check_kv_offset()
    checker.check_split_locs()
    checker.check_reduce()
    checker.check_masked_rows()
    checker.check_budget_bounds()
    order = {f"I{i}": i for i in range(1, 12)}
    return sorted(checker.out, key=lambda v: order.get(v.invariant, 99))


def assert_plan_invariants(plan: WorkPlan, **inputs: Any) -> None:
    """Raise `PlanError` listing every violation `check_plan` finds (keyword inputs)."""
    __tracebackhide__ = True
    violations = check_plan(plan, **inputs)
    if violations:
        lines = "\n".join(f"  {v}" for v in violations)
        raise PlanError(f"plan breaks {len(violations)} invariant(s):\n{lines}")
