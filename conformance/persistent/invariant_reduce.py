"""Plan invariants of the reduce maps (I7-I9) and of the v1.2 budget (I2 bound, I11)."""

from __future__ import annotations

from collections import Counter

from conformance.persistent.invariant_state import CheckerState, ceil_div, ints


class ReduceChecks(CheckerState):
    """I7-I9 over the reduce buffers and the budget checks of the v1.2 scheduler."""

    def check_reduce(self) -> None:
        plan = self.plan
        ind = ints(plan.reduce_indptr)
        tile_cnt = len(ind) - 1
        final_map = plan.reduce_final_map.tolist()
        pmap = ints(plan.reduce_partial_map)
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
        gran, overhead = self.gran, max(1, ceil_div(16, self.page_size))
        num_splits = self.num_cu if self.msb < 0 else min(self.num_cu, self.msb * self.num_vb)
        if num_splits < 1:
            return
        blocks = {}
        for tile in self.tiles:
            begin, end = self.kv_range(tile.batch)
            blocks[tile.index] = ceil_div(end - begin, gran)
        payload = ceil_div(sum(b + overhead for b in blocks.values()), num_splits) + overhead
        slack = ceil_div(self.max_sq - 1, gran)
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
                cost += ceil_div(stop - info.kv_start, gran) + overhead
            if cost > payload + slack:
                self.add(
                    "I11",
                    f"program {c} holds {cost} blocks incl. overhead, over the "
                    f"payload {payload} plus a tail allowance of {slack}",
                    work=self.wip[c],
                    fields=("work_indptr", "kv_start", "kv_end"),
                )
