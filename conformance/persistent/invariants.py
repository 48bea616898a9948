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

from collections.abc import Mapping
from typing import Any

import torch

from conformance.errors import PlanError
from conformance.persistent.invariant_reduce import ReduceChecks
from conformance.persistent.invariant_state import PlanViolation, ints
from conformance.persistent.invariant_works import WorkChecks
from conformance.persistent.plan import WorkPlan

__all__ = ["PlanViolation", "assert_plan_invariants", "check_inputs", "check_plan"]

BATCH_KEYWORDS: tuple[str, ...] = (
    "qo_indptr",
    "kv_indptr",
    "kv_last_page_lens",
    "page_size",
    "causal",
)
"""The keywords `check_plan` requires: the batch a plan is checked against."""
SCALAR_KEYWORDS: tuple[str, ...] = (
    "max_seqlen_qo",
    "uni_seqlen_qo",
    "kv_granularity",
    "max_split_per_batch",
    "num_cus",
)
"""Its optional keywords, read from ``plan.params`` when not given."""


class _Checker(WorkChecks, ReduceChecks):
    """Every check of one plan."""


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
    qo, kv, last = ints(qo_indptr), ints(kv_indptr), ints(kv_last_page_lens)
    if len(kv) < 2 or len(qo) != len(kv) or len(last) != len(kv) - 1:
        raise PlanError(
            f"kv_indptr: check_plan needs qo_indptr and kv_indptr of one length >= 2 and "
            f"kv_last_page_lens one shorter; found lengths {len(qo)}, {len(kv)}, {len(last)}"
        )
    given = {  # None: read from the plan's params
        "uni_seqlen_qo": uni_seqlen_qo,
        "kv_granularity": kv_granularity,
        "max_split_per_batch": max_split_per_batch,
        "num_cus": num_cus,
    }
    checker = _Checker(
        plan,
        qo=qo,
        kv=kv,
        last=last,
        page_size=page_size,
        causal=bool(causal),
        max_seqlen_qo=max_seqlen_qo if max_seqlen_qo is not None else plan.max_seqlen_qo,
        check_budget=check_budget,
        **{key: plan.params.get(key) if value is None else value for key, value in given.items()},
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


def check_inputs(call: Mapping[str, Any], *, scalars: bool = False) -> dict[str, Any]:
    """The `check_plan` keywords of a planner call: its batch (`BATCH_KEYWORDS`), and with
    `scalars` also `SCALAR_KEYWORDS` (else `check_plan` reads them from ``plan.params``)."""
    return {key: call[key] for key in BATCH_KEYWORDS + (SCALAR_KEYWORDS if scalars else ())}


def assert_plan_invariants(plan: WorkPlan, **inputs: Any) -> None:
    """Raise `PlanError` listing every violation `check_plan` finds (keyword inputs)."""
    __tracebackhide__ = True
    violations = check_plan(plan, **inputs)
    if violations:
        lines = "\n".join(f"  {v}" for v in violations)
        raise PlanError(f"plan breaks {len(violations)} invariant(s):\n{lines}")
