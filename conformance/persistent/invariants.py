"""Invariants every persistent-decode plan must satisfy: the table `INVARIANTS`, I1-I11.

`check_plan` works on any backend's `WorkPlan` (AITER's buffers wrapped in one, the
reference planner's, a foreign backend's) and returns every violation it finds, in the
table's order; `assert_plan_invariants` raises `PlanError` listing them. Each invariant's
check lives in the module its id is listed under: I1, I2, I11 in `invariants_programs`;
I3-I6, I10 in `invariants_tiles`; I7-I9 in `invariants_reduce`. docs/planner.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from conformance.errors import PlanError
from conformance.persistent.invariants_programs import (
    check_i1_work_indptr,
    check_i2_busy_prefix,
    check_i11_program_payload,
)
from conformance.persistent.invariants_reduce import (
    check_i7_reduce_indptr,
    check_i8_partials,
    check_i9_final_map,
)
from conformance.persistent.invariants_tiles import (
    check_i3_qo_partition,
    check_i4_kv_coverage,
    check_i5_kv_offset,
    check_i6_split_locs,
    check_i10_masked_rows,
)
from conformance.persistent.plan import WorkPlan
from conformance.persistent.plan_state import PlanState, PlanViolation, ints
from conformance.rule_table import Rule

__all__ = [
    "INVARIANTS",
    "Invariant",
    "PlanViolation",
    "assert_plan_invariants",
    "check_inputs",
    "check_plan",
]


Invariant = Rule[PlanState]
"""A plan invariant: its id, the check that yields its violations (`Findings`), its doc."""

INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "I1",
        check_i1_work_indptr,
        "`work_indptr` starts at 0, never decreases and ends at `num_works`, which fits "
        "`work_info_set`; one entry per program plus one; every work's padding is 0.",
    ),
    Invariant(
        "I2",
        check_i2_busy_prefix,
        "(budget) The programs with work form a prefix no longer than `num_splits`.",
    ),
    Invariant(
        "I3",
        check_i3_qo_partition,
        "Every work names a virtual batch, and per virtual batch the qo tiles partition "
        "its q rows.",
    ),
    Invariant(
        "I4",
        check_i4_kv_coverage,
        "Per tile, the works' kv ranges are non-empty, ascending and contiguous and cover "
        "`[kv_begin, kv_end - tail)`; `tail` is 0 unless causal with page 1, and never more "
        "than the tokens the tile's last q row cannot see.",
    ),
    Invariant(
        "I5",
        check_i5_kv_offset,
        "`kv_offset` is the number of the batch's kv tokens after `kv_end`.",
    ),
    Invariant(
        "I6",
        check_i6_split_locs,
        "A tile has one work iff its `partial_qo_loc` is -1; a split tile's works have "
        "distinct locs >= 0 and consecutive work ids.",
    ),
    Invariant(
        "I7",
        check_i7_reduce_indptr,
        "`reduce_indptr` starts at 0 and never decreases, in groups of size 0 or 2..programs, "
        "padded with the total past the last tile; the total is `num_partials`.",
    ),
    Invariant(
        "I8",
        check_i8_partials,
        "`reduce_partial_map[:total]` lists each split tile's locs in kv order, in one group; "
        "partial rows are pairwise disjoint and inside the partial buffer.",
    ),
    Invariant(
        "I9",
        check_i9_final_map,
        "`reduce_final_map[group]` is `(qo_start, qo_end)` of the group's tile.",
    ),
    Invariant(
        "I10",
        check_i10_masked_rows,
        "(page 1, causal) Every q row of a work sees at least one of its kv tokens (#2106).",
    ),
    Invariant(
        "I11",
        check_i11_program_payload,
        "(budget) Each program's blocks plus overhead stay within the payload, except one "
        "absorbed tail of at most `ceil((max_seqlen_qo - 1) / kv_granularity)` blocks.",
    ),
)
"""Every plan invariant, in the order `check_plan` reports them."""

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
    """Every violation of `INVARIANTS` in ``plan`` for the given batch (empty when conforming).

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
    state = PlanState(
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
    return [
        PlanViolation(invariant.code, *finding)
        for invariant in INVARIANTS
        for finding in invariant.check(state)
    ]


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
