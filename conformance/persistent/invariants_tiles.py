"""Plan invariants of the works and their qo tiles: qo partition (I3), kv coverage (I4),
kv_offset (I5), split locations (I6) and fully masked rows (I10)."""

from __future__ import annotations

from collections import Counter

from conformance.persistent.plan_state import Finding, Findings, PlanState, Tile


def check_i3_qo_partition(state: PlanState) -> Findings:
    """I3: every work names a virtual batch, and per virtual batch the qo tiles partition
    its q rows."""
    for w in state.stray_works:
        batch_idx = state.works[w].batch_idx
        yield Finding(
            f"batch_idx={batch_idx} outside 0..{state.num_vb - 1} "
            f"({state.batch} batches x fold ratio {state.ratio})",
            work=w,
            fields=("batch_idx",),
        )
    per_batch: dict[int, list[Tile]] = {}
    for tile in state.tiles:
        per_batch.setdefault(tile.batch, []).append(tile)
    for vb in range(state.num_vb):
        tiles = sorted(per_batch.get(vb, []), key=lambda t: (t.qo_start, t.qo_end))
        begin, end = state.q_begin[vb], state.q_end[vb]
        if not tiles:
            yield Finding(
                f"virtual batch {vb} (q rows [{begin},{end})) has no work",
                fields=("batch_idx",),
            )
            continue
        cursor = begin
        for tile in tiles:
            w = tile.works[0]
            if tile.qo_start >= tile.qo_end:
                yield Finding(
                    f"empty q range [{tile.qo_start},{tile.qo_end})",
                    work=w,
                    tile=tile.index,
                    fields=("qo_start", "qo_end"),
                )
            if tile.qo_start != cursor:
                what = "overlaps" if tile.qo_start < cursor else "leaves a gap after"
                yield Finding(
                    f"batch {vb}: q range [{tile.qo_start},{tile.qo_end}) "
                    f"{what} row {cursor} (batch rows [{begin},{end}))",
                    work=w,
                    tile=tile.index,
                    fields=("qo_start",),
                )
            cursor = max(cursor, tile.qo_end)
        if cursor != end:
            yield Finding(
                f"batch {vb}: tiles end at q row {cursor}, batch rows are [{begin},{end})",
                work=tiles[-1].works[-1],
                tile=tiles[-1].index,
                fields=("qo_end",),
            )


def check_i4_kv_coverage(state: PlanState) -> Findings:
    """I4: per tile, the works' kv ranges are non-empty, ascending and contiguous and cover
    ``[kv_begin, kv_end - tail)``, ``tail`` at most what the last q row cannot see."""
    for tile in state.tiles:
        begin, end = state.kv_range(tile.batch)
        tail_max = state.max_tail(tile)
        cursor = begin
        for i, w in enumerate(tile.works):
            info = state.works[w]
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
                yield Finding(msg, work=w, tile=tile.index, fields=("kv_start",))
            empty_batch = end - begin == 0
            if ke < ks or (ke == ks and not empty_batch):
                yield Finding(
                    f"empty or reversed kv range [{ks},{ke}) in a batch with kv [{begin},{end})",
                    work=w,
                    tile=tile.index,
                    fields=("kv_start", "kv_end"),
                )
            cursor = max(cursor, ke)
        last_end = state.works[tile.works[-1]].kv_end
        trimmed = end - last_end
        if not 0 <= trimmed <= tail_max:
            yield Finding(
                f"tile's kv ends at {last_end}; expected {end} minus a causal "
                f"trim of 0..{tail_max} (batch kv [{begin},{end}), q rows "
                f"[{tile.qo_start},{tile.qo_end}) of [{state.q_begin[tile.batch]},"
                f"{state.q_end[tile.batch]}))",
                work=tile.works[-1],
                tile=tile.index,
                fields=("kv_end",),
            )


def check_i5_kv_offset(state: PlanState) -> Findings:
    """I5: ``kv_offset`` is the number of this batch's kv tokens after ``kv_end``."""
    for w, info in enumerate(state.works):
        if w not in state.tile_of:
            continue
        expected = state.kv_tokens_after(info.batch_idx, info.kv_end)
        if info.kv_offset != expected:
            yield Finding(
                f"kv_offset={info.kv_offset}, expected {expected} kv tokens "
                f"after kv_end={info.kv_end} (batch kv pages "
                f"{list(state.kv_range(info.batch_idx))}, page_size={state.page_size})",
                work=w,
                tile=state.tile_of[w].index,
                fields=("kv_offset",),
            )


def check_i6_split_locs(state: PlanState) -> Findings:
    """I6: a tile has one work iff its ``partial_qo_loc`` is -1; a split tile's works have
    distinct locs >= 0 and consecutive work ids."""
    for tile in state.tiles:
        locs = [state.works[w].partial_qo_loc for w in tile.works]
        if len(tile.works) == 1:
            if locs[0] != -1:
                yield _i6_finding(
                    tile,
                    tile.works[0],
                    f"unsplit tile has partial_qo_loc={locs[0]}, expected -1",
                )
            continue
        for w, loc in zip(tile.works, locs, strict=True):
            if loc < 0:
                yield _i6_finding(
                    tile, w, f"tile split into {len(tile.works)} works but partial_qo_loc={loc}"
                )
        dupes = sorted(loc for loc, n in Counter(locs).items() if n > 1)
        if dupes:
            yield _i6_finding(
                tile, tile.works[0], f"split tile's works share partial_qo_loc {dupes}"
            )
        first = tile.works[0]
        if tile.works != list(range(first, first + len(tile.works))):
            message = f"split tile's works {tile.works} are not consecutive work ids"
            yield _i6_finding(tile, first, message, field="batch_idx")


def _i6_finding(tile: Tile, work: int, message: str, *, field: str = "partial_qo_loc") -> Finding:
    return Finding(message, work=work, tile=tile.index, fields=(field,))


def check_i10_masked_rows(state: PlanState) -> Findings:
    """I10: (page 1, causal) every q row of a work sees at least one of its kv tokens."""
    if not (state.causal and state.page_size == 1):
        return
    for w, info in enumerate(state.works):
        tile = state.tile_of.get(w)
        if tile is None or info.kv_end <= info.kv_start:
            continue
        _, end = state.kv_range(tile.batch)
        unseen = state.q_end[tile.batch] - 1 - info.qo_start  # rows after the first one
        visible_end = end - unseen
        if info.kv_start >= visible_end:
            yield Finding(
                f"q row {info.qo_start} sees kv tokens before {visible_end} "
                f"only, none of this work's kv [{info.kv_start},{info.kv_end}): it is "
                f"fully masked (kv tail shorter than max_seqlen_qo={state.max_sq}, "
                f"#2106)",
                work=w,
                tile=tile.index,
                fields=("kv_start", "kv_end"),
            )
