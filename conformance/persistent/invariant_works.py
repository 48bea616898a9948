"""Plan invariants of the works: qo partition (I3), kv coverage (I4), kv_offset (I5),
split locations (I6) and fully masked rows (I10)."""

from __future__ import annotations

from collections import Counter

from conformance.persistent.invariant_state import CheckerState, Tile


class WorkChecks(CheckerState):
    """I3-I6 and I10 over the tiles that `CheckerState.collect_tiles` found."""

    def check_qo_partition(self) -> None:
        per_batch: dict[int, list[Tile]] = {}
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
                    self._add_i6(
                        tile,
                        tile.works[0],
                        f"unsplit tile has partial_qo_loc={locs[0]}, expected -1",
                    )
                continue
            for w, loc in zip(tile.works, locs, strict=True):
                if loc < 0:
                    self._add_i6(
                        tile, w, f"tile split into {len(tile.works)} works but partial_qo_loc={loc}"
                    )
            dupes = sorted(loc for loc, n in Counter(locs).items() if n > 1)
            if dupes:
                self._add_i6(
                    tile, tile.works[0], f"split tile's works share partial_qo_loc {dupes}"
                )
            first = tile.works[0]
            if tile.works != list(range(first, first + len(tile.works))):
                message = f"split tile's works {tile.works} are not consecutive work ids"
                self._add_i6(tile, first, message, field="batch_idx")

    def _add_i6(
        self, tile: Tile, work: int, message: str, *, field: str = "partial_qo_loc"
    ) -> None:
        self.add("I6", message, work=work, tile=tile.index, fields=(field,))

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
