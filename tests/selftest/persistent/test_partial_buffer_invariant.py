"""Negative control of invariant I8's partial-buffer bound: partial rows stay inside it.

A split work whose ``partial_qo_loc`` points past the fp32 partial buffer (sized
``reduce_partial_map`` entries × ``max_seqlen_qo`` rows) would write outside it; the plan
invariants must reject it, naming the work and the buffer.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from conformance.persistent import check_inputs, check_plan, plan_persistent_decode
from conformance.persistent.plan import WorkInfo

pytestmark = pytest.mark.selftest

# The planner calls shared by this folder's tests (plancall.py is a helper, not a test module).
_CALL = runpy.run_path(str(Path(__file__).with_name("plancall.py")))
ARGS = _CALL["plan_args"]([1, 1], [1000, 50])
LOC = WorkInfo._fields.index("partial_qo_loc")


def _check(plan):
    return check_plan(plan, **check_inputs(ARGS))


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
