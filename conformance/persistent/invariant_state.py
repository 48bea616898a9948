"""Shared state of the plan-invariant checks: the violation record, the tiles of a plan,
and the checks of ``work_indptr`` (I1, I2 prefix) that every other check builds on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

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
class Tile:
    """Works sharing one (virtual batch, qo range), in work-id order."""

    index: int
    batch: int
    qo_start: int
    qo_end: int
    works: list[int]


def ints(value: Any) -> list[int]:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").reshape(-1).tolist()
    return [int(v) for v in value]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class CheckerState:
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
        self.wip = ints(plan.work_indptr)
        self.num_cu = len(self.wip) - 1
        rows = min(max(plan.num_works, 0), plan.work_info_set.shape[0])
        self.works = [WorkInfo(*r) for r in plan.work_info_set[:rows].tolist()]
        self.tiles: list[Tile] = []
        self.tile_of: dict[int, Tile] = {}

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

    def max_tail(self, tile: Tile) -> int:
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
        by_key: dict[tuple[int, int, int], Tile] = {}
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
                tile = Tile(len(self.tiles), *key, works=[])
                by_key[key] = tile
                self.tiles.append(tile)
            tile.works.append(w)
            self.tile_of[w] = tile
