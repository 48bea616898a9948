"""Negative controls of invariant I8's partial rows: inside the buffer, pairwise disjoint.

A split work whose ``partial_qo_loc`` points past the fp32 partial buffer (sized
``reduce_partial_map`` entries × ``max_seqlen_qo`` rows) would write outside it; the plan
invariants must reject it, naming the work and the buffer. A work's partial rows are a span
of its query length: with queries of several tokens, a span whose first row is inside the
buffer (or past another span's end) may still end outside it (or overlap), so every control
runs with queries of 1, 2 and 4 tokens.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.persistent import (
    PlanViolation,
    WorkPlan,
    check_inputs,
    check_plan,
    plan_persistent_decode,
)
from conformance.persistent.plan import WorkInfo

from plancall import plan_args

pytestmark = pytest.mark.selftest

QUERY_TOKENS = (1, 2, 4)
LOC = WorkInfo._fields.index("partial_qo_loc")


def _args(tokens: int) -> dict[str, Any]:
    return plan_args([tokens, tokens], [1000, 50])


ARGS = _args(1)


def _check(plan: WorkPlan, args: dict[str, Any] = ARGS) -> list[PlanViolation]:
    return check_plan(plan, **check_inputs(args))


def _split_plan(tokens: int) -> tuple[WorkPlan, dict[str, Any], list[int]]:
    """A conforming plan of queries of `tokens` tokens and its split works (at least two)."""
    args = _args(tokens)
    plan = plan_persistent_decode(**args)
    assert _check(plan, args) == []
    split = [w for w in range(plan.num_works) if int(plan.work_info_set[w, LOC]) >= 0]
    assert len(split) >= 2, "the example must split"
    return plan, args, split


def _move_loc(plan: WorkPlan, work: int, loc: int) -> None:
    """Move `work`'s partial rows to `loc`, keeping the reduce map consistent with it."""
    old = int(plan.work_info_set[work, LOC])
    plan.work_info_set[work, LOC] = loc
    entries = plan.reduce_partial_map
    entries[entries == old] = loc


@pytest.mark.parametrize("tokens", QUERY_TOKENS)
def test_partial_rows_ending_past_the_buffer_are_rejected_by_i8(tokens: int) -> None:
    """The span's first row is inside the buffer (for several tokens), its last is not."""
    plan, args, split = _split_plan(tokens)
    limit = plan.reduce_partial_map.numel() * args["max_seqlen_qo"]
    last = split[-1]
    _move_loc(plan, last, limit - tokens + 1)
    outside = [v for v in _check(plan, args) if "outside the partial buffer" in v.message]
    assert [(v.invariant, v.work) for v in outside] == [("I8", last)], _check(plan, args)
    assert f"[{limit - tokens + 1},{limit + 1})" in outside[0].message


@pytest.mark.parametrize("tokens", QUERY_TOKENS)
def test_partial_rows_ending_at_the_buffer_end_pass(tokens: int) -> None:
    """Positive control: the last span may end exactly at the buffer's end."""
    plan, args, split = _split_plan(tokens)
    limit = plan.reduce_partial_map.numel() * args["max_seqlen_qo"]
    _move_loc(plan, split[-1], limit - tokens)
    assert _check(plan, args) == []


@pytest.mark.parametrize("tokens", QUERY_TOKENS)
def test_partial_rows_overlapping_a_later_row_are_rejected_by_i8(tokens: int) -> None:
    """A span starting inside another span (on its last row) overlaps it."""
    plan, args, split = _split_plan(tokens)
    first, moved = split[0], split[-1]
    _move_loc(plan, moved, int(plan.work_info_set[first, LOC]) + tokens - 1)
    found = [v for v in _check(plan, args) if "overlap" in v.message]
    assert found and (found[0].invariant, found[0].work) == ("I8", moved), _check(plan, args)
    assert f"overlap the rows of work {first}," in found[0].message


def test_partial_rows_past_the_buffer_are_rejected_by_i8() -> None:
    plan = plan_persistent_decode(**ARGS)
    assert _check(plan) == []
    works = plan.work_info_set[: plan.num_works]
    split = [w for w in range(plan.num_works) if int(works[w, LOC]) >= 0]
    assert len(split) >= 2, "the example must split"
    last = split[-1]
    limit = plan.reduce_partial_map.numel() * ARGS["max_seqlen_qo"]
    old = int(plan.work_info_set[last, LOC])
    plan.work_info_set[last, LOC] = limit  # one past the buffer's last row
    entries = plan.reduce_partial_map
    entries[entries == old] = limit  # keep the reduce map consistent: only the bound breaks
    found = _check(plan)
    outside = [v for v in found if "outside the partial buffer" in v.message]
    assert outside and outside[0].invariant == "I8" and outside[0].work == last, found
    assert f"[0,{limit})" in outside[0].message
