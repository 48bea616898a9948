"""What the plan-invariant checks share: the violation record, one check's finding, and
`PlanState`, a plan read against its batch (works, qo tiles, per-batch q and kv ranges)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from conformance.persistent.plan import WorkInfo, WorkPlan


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


class Finding(NamedTuple):
    """What one check found; `check_plan` makes it a `PlanViolation` of the check's id."""

    message: str
    work: int | None = None
    tile: int | None = None
    fields: tuple[str, ...] = ()


Findings = Iterator[Finding]
"""What an invariant's check yields."""


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


class PlanState:
    """One plan read against its batch: what every invariant's check reads.

    Works whose ``batch_idx`` names no virtual batch belong to no tile; they are kept in
    ``stray_works`` (I3 reports them).
    """

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
        self.stray_works: list[int] = []
        self._collect_tiles()

    def _collect_tiles(self) -> None:
        by_key: dict[tuple[int, int, int], Tile] = {}
        for w, info in enumerate(self.works):
            if not 0 <= info.batch_idx < self.num_vb:
                self.stray_works.append(w)
                continue
            key = (info.batch_idx, info.qo_start, info.qo_end)
            tile = by_key.get(key)
            if tile is None:
                tile = Tile(len(self.tiles), *key, works=[])
                by_key[key] = tile
                self.tiles.append(tile)
            tile.works.append(w)
            self.tile_of[w] = tile

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
