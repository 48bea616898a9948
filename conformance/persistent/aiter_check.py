"""Checks of a plan made by AITER's own planner (``aiter.get_mla_metadata_v1``).

Two checks, both exact (the buffers as ``get_mla_metadata_v1`` in ROCm/aiter's
``aiter/ops/attention.py`` fills them, and ``MlaWorkInfo`` in ``csrc/include/mla.h``):

- `pointer_table_problems`: ``work_metadata_ptrs`` must hold the device addresses of
  ``work_indptr`` and ``work_info_set``; the asm kernel reads its work lists through these
  two pointers, not through the tensors it is given.
- `aiter_plan_matches_reference`: the reference planner, called with the same arguments,
  must produce the same buffer shapes and the same values on every region a v1.2 planner
  writes (`WorkPlan.written_regions`).

Both return a list of problems (empty when the plan conforms), each naming the buffer, the
first differing index and the two values, so that a test or a debug mode can print them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from conformance.persistent.planner import plan_persistent_decode

_PLAN_COUNTS: tuple[str, ...] = (
    "num_works",
    "num_partials",
    "num_tiles",
    "fold_ratio",
    "heads_per_work",
    "max_seqlen_qo",
)


def pointer_table_problems(
    work_metadata_ptrs: torch.Tensor, *, work_indptr: torch.Tensor, work_info_set: torch.Tensor
) -> list[str]:
    """Problems of ``work_metadata_ptrs``: it must equal the two buffers' data pointers."""
    if work_metadata_ptrs.numel() != 2:
        return [
            f"work_metadata_ptrs: expected 2 entries, found shape {tuple(work_metadata_ptrs.shape)}"
        ]
    found = [int(v) for v in work_metadata_ptrs.cpu().tolist()]
    expected = [work_indptr.data_ptr(), work_info_set.data_ptr()]
    problems = []
    for index, (name, want, got) in enumerate(
        zip(("work_indptr", "work_info_set"), expected, found, strict=True)
    ):
        if want != got:
            problems.append(
                f"work_metadata_ptrs[{index}]: expected {name}.data_ptr() = {want:#x}, found "
                f"{got:#x}; the kernel would read its work lists from the wrong memory"
            )
    return problems


def _first_difference(ours: torch.Tensor, theirs: torch.Tensor) -> str:
    """Where two same-shape integer tensors first differ, and the two values there."""
    unequal = (ours != theirs).nonzero()
    index = tuple(int(i) for i in unequal[0].tolist())
    position = index[0] if len(index) == 1 else index
    count = int(unequal.shape[0])
    return (
        f"first difference at {position}: aiter {ours[index].item()}, reference "
        f"{theirs[index].item()} ({count} differing entries)"
    )


def aiter_plan_matches_reference(
    plan: WorkPlan,
    planner_call: Mapping[str, Any],
    *,
    work_metadata_ptrs: torch.Tensor | None = None,
) -> list[str]:
    """Differences between an AITER-made `plan` and the reference planner's plan.

    `planner_call` holds the keyword arguments of `plan_persistent_decode` the plan was made
    for (``DecodeMetadata.planner_call``); its ``arch`` and ``num_cus`` must be the device's,
    as AITER plans for the device it runs on. Compared exactly: the five buffers' shapes
    (AITER's ``get_mla_metadata_info_v1`` sizing against the suite's), the plan counts and
    fold, and every written region. With `work_metadata_ptrs`, the pointer table is checked
    too (`pointer_table_problems`). Returns ``[]`` when everything matches.
    """
    reference = plan_persistent_decode(**planner_call)
    problems: list[str] = []
    for name in PLAN_BUFFERS:
        ours, theirs = tuple(getattr(plan, name).shape), tuple(getattr(reference, name).shape)
        if ours != theirs:
            problems.append(f"{name}: aiter sized it {ours}, the reference sizing gives {theirs}")
    for name in _PLAN_COUNTS:
        ours, theirs = getattr(plan, name), getattr(reference, name)
        if ours != theirs:
            problems.append(f"{name}: aiter {ours}, reference {theirs}")
    expected = reference.written_regions()
    for name, found in plan.written_regions().items():
        ours, theirs = found.cpu(), expected[name]
        if ours.shape != theirs.shape:
            problems.append(
                f"{name}: aiter wrote shape {tuple(ours.shape)}, the reference "
                f"{tuple(theirs.shape)}"
            )
        elif not torch.equal(ours, theirs):
            problems.append(f"{name}: {_first_difference(ours, theirs)}")
    if work_metadata_ptrs is not None:
        problems.extend(
            pointer_table_problems(
                work_metadata_ptrs,
                work_indptr=plan.work_indptr,
                work_info_set=plan.work_info_set,
            )
        )
    return problems
