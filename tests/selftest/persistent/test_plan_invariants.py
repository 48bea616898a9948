"""Negative controls of the plan invariants (docs/planner.md): broken plans are rejected.

Each test breaks a correct plan (docs/planner.md's worked examples) the way a buggy planner
would and asserts `check_plan` names the right invariant, the work or tile and the fields.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from conformance.errors import PlanError
from conformance.persistent import (
    PlanViolation,
    WorkPlan,
    assert_plan_invariants,
    check_inputs,
    check_plan,
    plan_persistent_decode,
)
from conformance.persistent.planner import plan_with_walk

from plancall import i32, plan_args

pytestmark = pytest.mark.selftest

case = plan_args  # every case here has uniform q lengths
FP8 = torch.float8_e4m3fnuz


EXAMPLE_1 = case([1, 1, 1], [1000, 50, 3000])  # splits on both sides of an unsplit batch
EXAMPLE_2 = case([4, 4], [577, 40], num_cus=4)  # tail rule
EXAMPLE_3 = case([2, 2], [300, 40], num_heads_q=128, q_dtype=FP8, kv_dtype=FP8, num_cus=4)


def violations(plan: WorkPlan, args: dict[str, Any]) -> list[PlanViolation]:
    return check_plan(plan, **check_inputs(args))


def ids(found: list[PlanViolation]) -> set[str]:
    return {v.invariant for v in found}


def only_violation(plan: WorkPlan, args: dict[str, Any], invariant: str) -> PlanViolation:
    """The first violation of `plan`, which must break `invariant` and no other."""
    found = violations(plan, args)
    assert ids(found) == {invariant}, [str(v) for v in found]
    return found[0]


def set_work(plan: WorkPlan, work: int, **fields: int) -> None:
    columns = {
        "batch_idx": 0,
        "partial_qo_loc": 1,
        "qo_start": 2,
        "qo_end": 3,
        "kv_start": 4,
        "kv_end": 5,
        "kv_offset": 6,
        "padding": 7,
    }
    for name, value in fields.items():
        plan.work_info_set[work, columns[name]] = value


@pytest.mark.parametrize("args", [EXAMPLE_1, EXAMPLE_2, EXAMPLE_3], ids=["ex1", "ex2", "ex3"])
def test_correct_plans_pass(args: dict[str, Any]) -> None:
    plan = plan_persistent_decode(**args)
    assert violations(plan, args) == []
    assert_plan_invariants(plan, **check_inputs(args))


def test_planner_without_tail_rule_is_rejected_by_i10() -> None:
    plan = plan_with_walk(**EXAMPLE_2, walk="literal", tail_rule=False)
    # [288,576) was emitted and the 1-token tail [576,577) became its own split.
    assert (576, 577) in [(w.kv_start, w.kv_end) for w in plan.works()]
    found = [v for v in violations(plan, EXAMPLE_2) if v.invariant == "I10"]
    assert found, violations(plan, EXAMPLE_2)
    assert found[0].work == 2 and found[0].fields == ("kv_start", "kv_end")
    assert "q row 0" in found[0].message and "[576,577)" in found[0].message


def test_no_tail_rule_variant_is_rejected_on_every_causal_tail_probe() -> None:
    rng = random.Random(11)
    for _ in range(40):
        sq = rng.randint(2, 4)
        j = rng.randint(1, 7)
        bpc = rng.randint(-(-17 // (8 - j)), 24 // (8 - j))
        args = case([sq], [16 * j * bpc + rng.randint(1, sq - 1)])
        assert violations(plan_persistent_decode(**args), args) == []
        broken = plan_with_walk(**args, walk="literal", tail_rule=False)
        assert "I10" in ids(violations(broken, args)), args


def test_dropped_kv_range_is_rejected_by_i4() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    # Drop work 5 (batch 2, kv [1946,2554)) and close its program as empty.
    keep = [w for w in range(plan.num_works) if w != 5]
    plan.work_info_set[: plan.num_works - 1] = plan.work_info_set[keep]
    plan.num_works -= 1
    plan.work_indptr = i32([0, 1, 2, 4, 5, 5, 6, 7, 8])
    found = [v for v in violations(plan, EXAMPLE_1) if v.invariant == "I4"]
    assert found and found[0].fields == ("kv_start",)
    assert "[1946,2554) uncovered" in found[0].message


def test_overlapping_fragments_are_rejected_by_i4() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    set_work(plan, 1, kv_start=600)  # previous fragment ends at 608
    found = [v for v in violations(plan, EXAMPLE_1) if v.invariant == "I4"]
    assert found and found[0].work == 1
    assert "overlaps the previous fragment ending at 608" in found[0].message


def test_causal_over_trim_is_rejected_by_i4() -> None:
    plan = plan_persistent_decode(**EXAMPLE_3)
    set_work(plan, 0, kv_end=298, kv_offset=2)  # q row 0 may lose 1 token, not 2
    found = [v for v in violations(plan, EXAMPLE_3) if v.invariant == "I4"]
    assert found and found[0].work == 0 and found[0].fields == ("kv_end",)
    assert "trim of 0..1" in found[0].message


def test_wrong_kv_offset_is_rejected_by_i5() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    set_work(plan, 0, kv_offset=391)
    found = only_violation(plan, EXAMPLE_1, "I5")
    assert found.work == 0 and found.fields == ("kv_offset",)
    assert "kv_offset=391, expected 392" in found.message


def test_wrong_kv_offset_with_pages_is_rejected_by_i5() -> None:
    args = case(
        [1, 1], [40, 3], page_size=16, kv_last_page_lens=i32([5, 8]), num_cus=4, causal=False
    )
    plan = plan_persistent_decode(**args)
    assert violations(plan, args) == []
    set_work(plan, 0, kv_offset=(40 - 32) * 16)  # counts whole pages, ignores the last one
    assert ids(violations(plan, args)) == {"I5"}


def test_size_one_reduce_group_is_rejected_by_i7() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    # A buggy planner files unsplit batch 1 as a one-entry reduce group.
    set_work(plan, 2, partial_qo_loc=8)
    plan.reduce_indptr = i32([0, 2, 3, 9])
    plan.reduce_partial_map[:9] = i32([0, 1, 8, 2, 3, 4, 5, 6, 7])
    plan.num_partials = 9
    found = [v for v in violations(plan, EXAMPLE_1) if v.invariant == "I7"]
    assert found and found[0].tile == 1 and found[0].fields == ("reduce_indptr",)
    assert "size 1" in found[0].message


def test_overlapping_partial_rows_are_rejected_by_i8() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    set_work(plan, 3, partial_qo_loc=1)  # batch 2's first split reuses batch 0's row 1
    plan.reduce_partial_map[2] = 1
    found = only_violation(plan, EXAMPLE_1, "I8")
    assert found.work == 3 and "overlap the rows of work 1" in found.message


def test_partial_map_out_of_kv_order_is_rejected_by_i8() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    plan.reduce_partial_map[:2] = i32([1, 0])
    found = only_violation(plan, EXAMPLE_1, "I8")
    assert "in kv order [0, 1]" in found.message


def test_wrong_final_map_is_rejected_by_i9() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    plan.reduce_final_map[2] = i32([2, 4])
    found = only_violation(plan, EXAMPLE_1, "I9")
    assert found.tile == 2 and found.fields == ("reduce_final_map",)
    assert "[2, 4]" in found.message and "[2, 3]" in found.message


def test_unsplit_tile_with_a_partial_loc_is_rejected_by_i6() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    set_work(plan, 2, partial_qo_loc=8)
    found = only_violation(plan, EXAMPLE_1, "I6")
    assert found.work == 2 and found.fields == ("partial_qo_loc",)


def test_split_tile_with_minus_one_loc_is_rejected_by_i6() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    set_work(plan, 0, partial_qo_loc=-1)
    assert "I6" in ids(violations(plan, EXAMPLE_1))


def test_broken_work_indptr_is_rejected_by_i1() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    plan.work_indptr[-1] = 8
    found = [v for v in violations(plan, EXAMPLE_1) if v.invariant == "I1"]
    assert found and "work_indptr[-1]=8 but num_works=9" in found[0].message


def test_nonzero_padding_is_rejected_by_i1() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    set_work(plan, 4, padding=7)
    found = only_violation(plan, EXAMPLE_1, "I1")
    assert found.work == 4


def test_empty_program_before_busy_ones_is_rejected_by_i2() -> None:
    plan = plan_persistent_decode(**EXAMPLE_2)  # work_indptr [0, 1, 2, 3, 3]
    plan.work_indptr = i32([0, 1, 1, 2, 3])
    assert "I2" in ids(violations(plan, EXAMPLE_2))


def test_wrong_q_range_is_rejected_by_i3() -> None:
    plan = plan_persistent_decode(**EXAMPLE_3)
    set_work(plan, 1, qo_start=0, qo_end=2)  # tile 1 now overlaps tile 0's row
    assert "I3" in ids(violations(plan, EXAMPLE_3))


def test_work_outside_every_batch_is_rejected_by_i3() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    set_work(plan, 2, batch_idx=3)  # batch 1's only work names a fourth batch of three
    found = [v for v in violations(plan, EXAMPLE_1) if v.invariant == "I3"]
    assert found and found[0].work == 2 and found[0].fields == ("batch_idx",)
    assert "batch_idx=3 outside 0..2" in found[0].message


def test_over_budget_program_is_rejected_by_i11() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    # Program 0 takes all of batch 0 (63 blocks + 2 overheads) in two works.
    plan.work_indptr = i32([0, 2, 2, 4, 5, 6, 7, 8, 9])
    found = violations(plan, EXAMPLE_1)
    assert "I11" in ids(found) and "I2" in ids(found)
    i11 = next(v for v in found if v.invariant == "I11")
    assert "program 0 holds 95 blocks" in i11.message and "payload 54" in i11.message


def test_budget_checks_can_be_switched_off() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    plan.work_indptr = i32([0, 2, 2, 4, 5, 6, 7, 8, 9])
    assert not ids(check_plan(plan, **check_inputs(EXAMPLE_1), check_budget=False)) & {"I2", "I11"}


def test_assert_plan_invariants_lists_every_violation() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    set_work(plan, 0, kv_offset=391)
    plan.reduce_final_map[2] = i32([2, 4])
    with pytest.raises(PlanError, match=r"2 invariant\(s\)") as info:
        assert_plan_invariants(plan, **check_inputs(EXAMPLE_1))
    text = str(info.value)
    assert "I5 [work 0, tile 0] (kv_offset): kv_offset=391" in text
    assert "I9 [tile 2] (reduce_final_map)" in text


def test_check_plan_rejects_inconsistent_inputs() -> None:
    plan = plan_persistent_decode(**EXAMPLE_1)
    bad = {**check_inputs(EXAMPLE_1), "kv_last_page_lens": i32([1])}
    with pytest.raises(PlanError, match=r"^kv_indptr: .*lengths 4, 4, 1"):
        check_plan(plan, **bad)
