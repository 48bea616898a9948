"""The persistent-decode work plan: AITER's v1 metadata buffers, shared by every backend.

Layout (AITER's, ROCm/aiter: ``MlaWorkInfo`` in ``csrc/include/mla.h``, the buffers of
``get_mla_metadata_v1`` in ``aiter/ops/attention.py``):

- ``work_indptr[c]..work_indptr[c+1]``: work ids executed by persistent program ``c``;
  length ``num_cus + 1``.
- ``work_info_set[w, 0:8]``: one `MlaWorkInfo` per work (int32), fields in
  `WORK_INFO_FIELDS` order.
- ``reduce_indptr[t]..[t+1]``: partial group of qo tile ``t`` (empty if unsplit).
- ``reduce_final_map[t] = (qo_start, qo_end)``: final rows of split tile ``t``; rows of
  unsplit tiles are not written and never compared.
- ``reduce_partial_map[k]``: ``partial_qo_loc`` of each split, in kv order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import NamedTuple

import torch

WORK_INFO_FIELDS: tuple[str, ...] = (
    "batch_idx",  # virtual batch id (b * fold_ratio + g when heads are folded)
    "partial_qo_loc",  # first partial row of a split work, -1 when its tile is unsplit
    "qo_start",  # first q row (virtual rows when folded), inclusive
    "qo_end",  # last q row, exclusive
    "kv_start",  # index into kv_indices (pages), inclusive
    "kv_end",  # index into kv_indices (pages), exclusive
    "kv_offset",  # kv tokens of this batch that lie after kv_end
    "padding",  # always 0
)

PLAN_BUFFERS: tuple[str, ...] = (
    "work_indptr",
    "work_info_set",
    "reduce_indptr",
    "reduce_final_map",
    "reduce_partial_map",
)


class WorkInfo(NamedTuple):
    """One decoded row of ``work_info_set``."""

    batch_idx: int
    partial_qo_loc: int
    qo_start: int
    qo_end: int
    kv_start: int
    kv_end: int
    kv_offset: int
    padding: int


@dataclass
class WorkPlan:
    """A persistent-decode plan: five int32 buffers plus what is needed to read them.

    Buffers are sized as ``get_mla_metadata_info_v1`` sizes them; only the regions a
    planner writes are meaningful (see `written_regions`).
    """

    work_indptr: torch.Tensor
    work_info_set: torch.Tensor
    reduce_indptr: torch.Tensor
    reduce_final_map: torch.Tensor
    reduce_partial_map: torch.Tensor
    num_works: int
    num_partials: int
    num_tiles: int
    # How the plan reads q/o: heads per work after folding, and the fold ratio.
    fold_ratio: int = 1
    heads_per_work: int = 16
    max_seqlen_qo: int = 1
    # Provenance: the arguments the plan was made with.
    params: dict[str, object] = field(default_factory=dict)

    def works(self) -> list[WorkInfo]:
        """The written works, decoded."""
        rows = self.work_info_set[: self.num_works].tolist()
        return [WorkInfo(*row) for row in rows]

    def split_tiles(self) -> list[int]:
        """Ids of qo tiles whose reduce group is non-empty."""
        ind = self.reduce_indptr.tolist()
        return [t for t in range(self.num_tiles) if ind[t + 1] > ind[t]]

    def written_regions(self) -> dict[str, torch.Tensor]:
        """The buffer regions every conforming planner writes, for exact comparison."""
        tiles = self.split_tiles()
        final = self.reduce_final_map[tiles] if tiles else self.reduce_final_map[:0]
        return {
            "work_indptr": self.work_indptr,
            "work_info_set": self.work_info_set[: self.num_works],
            "reduce_indptr": self.reduce_indptr,
            "reduce_final_map[split tiles]": final,
            "reduce_partial_map": self.reduce_partial_map[: self.num_partials],
        }

    def to(self, device: torch.device | str) -> WorkPlan:
        """A copy with every buffer on `device`."""
        # a plain WorkPlan, also from a subclass (the device planner's lazy plan)
        copied = {f.name: getattr(self, f.name) for f in fields(WorkPlan)}
        moved = {name: copied[name].to(device) for name in PLAN_BUFFERS}
        return WorkPlan(**{**copied, **moved, "params": dict(copied["params"])})
