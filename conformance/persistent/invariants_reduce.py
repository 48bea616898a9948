"""Plan invariants of the reduce buffers: ``reduce_indptr`` (I7), ``reduce_partial_map``
and the partial rows (I8), ``reduce_final_map`` (I9)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from conformance.persistent.plan_state import Finding, Findings, PlanState, Tile, ints


@dataclass(frozen=True)
class ReduceBuffers:
    """The reduce buffers as lists, with the group total ``reduce_indptr`` gives."""

    ind: list[int]
    final_map: list[list[int]]
    pmap: list[int]
    total: int

    @property
    def tile_cnt(self) -> int:
        return len(self.ind) - 1


def reduce_buffers(state: PlanState) -> ReduceBuffers:
    plan = state.plan
    ind = ints(plan.reduce_indptr)
    tile_cnt = len(ind) - 1
    total = ind[min(len(state.tiles), tile_cnt)] if ind else 0
    return ReduceBuffers(ind, plan.reduce_final_map.tolist(), ints(plan.reduce_partial_map), total)


def check_i7_reduce_indptr(state: PlanState) -> Findings:
    """I7: ``reduce_indptr`` runs from 0 without decreasing, in groups of 0 or 2..programs,
    padded with the total past the last tile; the total is ``num_partials``."""
    plan, buffers = state.plan, reduce_buffers(state)
    ind, tile_cnt, total = buffers.ind, buffers.tile_cnt, buffers.total
    n_tiles = len(state.tiles)
    if len(buffers.final_map) != tile_cnt:
        yield Finding(
            f"reduce_final_map has {len(buffers.final_map)} rows, reduce_indptr "
            f"{len(ind)} entries (expected rows + 1)",
            fields=("reduce_indptr", "reduce_final_map"),
        )
    if n_tiles > tile_cnt:
        yield Finding(
            f"{n_tiles} qo tiles but reduce_indptr sized for {tile_cnt}",
            fields=("reduce_indptr",),
        )
    if plan.num_tiles != n_tiles:
        yield Finding(
            f"num_tiles={plan.num_tiles} but the works form {n_tiles} tiles",
            fields=("num_tiles",),
        )
    if not ind or ind[0] != 0:
        yield Finding(
            f"reduce_indptr[0]={ind[0] if ind else None}, expected 0",
            tile=0,
            fields=("reduce_indptr",),
        )
    for t in range(tile_cnt):
        size = ind[t + 1] - ind[t]
        if size < 0:
            yield Finding(
                f"reduce_indptr decreases: [{t}]={ind[t]} > [{t + 1}]={ind[t + 1]}",
                tile=t,
                fields=("reduce_indptr",),
            )
        elif size == 1 or size > state.num_cu:
            yield Finding(
                f"reduce group of size {size} (reduce_indptr[{t}]={ind[t]}, "
                f"[{t + 1}]={ind[t + 1]}); expected 0 or 2..{state.num_cu}",
                tile=t,
                fields=("reduce_indptr",),
            )
    for i in range(n_tiles + 1, len(ind)):
        if ind[i] != total:
            yield Finding(
                f"reduce_indptr[{i}]={ind[i]} past the last tile, expected the total {total}",
                fields=("reduce_indptr",),
            )
            break
    if total != plan.num_partials:
        yield Finding(
            f"reduce total {total} != num_partials={plan.num_partials}",
            fields=("reduce_indptr", "num_partials"),
        )


def _split_works(state: PlanState) -> list[int]:
    return [w for t in state.tiles if len(t.works) > 1 for w in t.works]


def _groups(state: PlanState, buffers: ReduceBuffers) -> list[tuple[int, list[int], Tile | None]]:
    """Every reduce group of two or more locs: (its index, its locs, the split tile they all
    belong to, or None when they do not belong to one)."""
    ind, entries = buffers.ind, buffers.pmap[: buffers.total]
    split_works = _split_works(state)
    work_of_loc = {state.works[w].partial_qo_loc: w for w in split_works}
    found = []
    for t in range(buffers.tile_cnt):
        group = entries[ind[t] : ind[t + 1]] if 0 <= ind[t] <= ind[t + 1] else []
        if len(group) < 2:
            continue
        members = [work_of_loc.get(loc) for loc in group]
        tiles = {state.tile_of[w].index for w in members if w is not None}
        one_tile = None if None in members or len(tiles) != 1 else state.tiles[tiles.pop()]
        found.append((t, group, one_tile))
    return found


def check_i8_partials(state: PlanState) -> Findings:
    """I8: ``reduce_partial_map[:total]`` lists each split tile's locs in kv order, in one
    group; the partial rows are pairwise disjoint and inside the partial buffer."""
    buffers = reduce_buffers(state)
    total, pmap_len = buffers.total, len(buffers.pmap)
    if total > pmap_len:
        yield Finding(
            f"reduce total {total} exceeds reduce_partial_map size {pmap_len}",
            fields=("reduce_partial_map",),
        )
        return
    entries = buffers.pmap[:total]
    split_works = _split_works(state)
    works = state.works
    locs = Counter(works[w].partial_qo_loc for w in split_works)
    if Counter(entries) != locs:
        missing = sorted((locs - Counter(entries)).elements())
        extra = sorted((Counter(entries) - locs).elements())
        yield Finding(
            f"reduce_partial_map[:total] differs from the split works' locs: "
            f"missing {missing}, unexpected {extra}",
            fields=("reduce_partial_map",),
        )
    # Partial rows: disjoint and inside the buffer.
    limit = pmap_len * state.max_sq
    spans = sorted(
        (
            works[w].partial_qo_loc,
            works[w].partial_qo_loc + works[w].qo_end - works[w].qo_start,
            w,
        )
        for w in split_works
    )
    reach, reach_work = -1, -1  # furthest row end so far and its work
    for start, stop, w in spans:
        if start < reach:
            yield Finding(
                f"partial rows [{start},{stop}) overlap the rows of work {reach_work}, "
                f"which end at {reach}",
                work=w,
                fields=("partial_qo_loc",),
            )
        if stop > reach:
            reach, reach_work = stop, w
    for s, e, w in spans:
        if s < 0 or e > limit:
            yield Finding(
                f"partial rows [{s},{e}) outside the partial buffer "
                f"[0,{limit}) (reduce_partial_map size {pmap_len} x max_seqlen_qo "
                f"{state.max_sq})",
                work=w,
                fields=("partial_qo_loc",),
            )
    # Each split tile is exactly one group, locs in kv (work) order.
    grouped: Counter[int] = Counter()
    for t, group, tile in _groups(state, buffers):
        if tile is None:
            yield Finding(
                f"reduce group {t} locs {group} do not all belong to one split tile",
                tile=t,
                fields=("reduce_partial_map",),
            )
            continue
        grouped[tile.index] += 1
        expected = [works[w].partial_qo_loc for w in tile.works]
        if group != expected:
            yield Finding(
                f"reduce group {t} lists locs {group}, expected the tile's locs "
                f"in kv order {expected}",
                tile=t,
                fields=("reduce_partial_map",),
            )
    for tile in state.tiles:
        if len(tile.works) > 1 and grouped[tile.index] != 1:
            yield Finding(
                f"split tile (batch {tile.batch}, q [{tile.qo_start},"
                f"{tile.qo_end})) is in {grouped[tile.index]} reduce groups, "
                f"expected 1",
                work=tile.works[0],
                tile=tile.index,
                fields=("reduce_indptr", "reduce_partial_map"),
            )


def check_i9_final_map(state: PlanState) -> Findings:
    """I9: ``reduce_final_map[group]`` is ``(qo_start, qo_end)`` of the group's split tile."""
    buffers = reduce_buffers(state)
    if buffers.total > len(buffers.pmap):
        return  # I8 names the reduce map; its groups cannot be read
    for t, _, tile in _groups(state, buffers):
        if tile is None:
            continue
        want = [tile.qo_start, tile.qo_end]
        if t < len(buffers.final_map) and buffers.final_map[t] != want:
            yield Finding(
                f"reduce_final_map[{t}]={buffers.final_map[t]}, expected (qo_start, "
                f"qo_end)={want} of its split tile",
                tile=t,
                fields=("reduce_final_map",),
            )
