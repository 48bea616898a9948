"""The plan features a golden case exists for, and how they are recognised."""

from __future__ import annotations

import math
from typing import Any

import torch

from conformance.errors import PlanError
from conformance.goldens.cases import GoldenCase
from conformance.goldens.record import plans_equal
from conformance.persistent.plan import WorkPlan
from conformance.persistent.planner import plan_persistent_decode, plan_with_walk
from conformance.persistent.profiles import get_profile
from kernels.plan_exec import PlanOutput

FEATURES: tuple[str, ...] = (
    "split",  # some qo tile is split over programs (partials + reduce)
    "fold",  # heads folded into virtual batches
    "qo-split",  # a request's q tokens span several qo tiles
    "tail-rule",  # the #2106 tail rule changed the plan
    "masked-split-rows",  # a split work has query rows that see none of its kv
    "all-neg-inf-group",  # a reduced row whose every split has lse = -inf
    "bf16-plan-differs",  # planning this fp8 case as bf16 gives other buffers (#46997)
    "capped",  # max_split_per_batch limits the programs that receive work
)


def _all_neg_inf_rows(plan: WorkPlan, partial_lse: torch.Tensor) -> bool:
    ind, pmap = plan.reduce_indptr.tolist(), plan.reduce_partial_map.tolist()
    final = plan.reduce_final_map.tolist()
    for tile in plan.split_tiles():
        q0, q1 = final[tile]
        locs = pmap[ind[tile] : ind[tile + 1]]
        for i in range(q1 - q0):
            if all(bool((partial_lse[loc + i] == -math.inf).all()) for loc in locs):
                return True
    return False


def plan_features(
    case: GoldenCase, kwargs: dict[str, Any], plan: WorkPlan, result: PlanOutput
) -> list[str]:
    """Which `FEATURES` this case's plan and result show."""
    found = []
    if plan.split_tiles():
        found.append("split")
    if plan.fold_ratio > 1:
        found.append("fold")
    if plan.num_tiles > case.batch * plan.fold_ratio:
        found.append("qo-split")
    if not plans_equal(plan, plan_with_walk(**kwargs, walk="literal", tail_rule=False)):
        found.append("tail-rule")
    written = result.partial_written
    if bool((result.partial_lse[written] == -math.inf).any()):
        found.append("masked-split-rows")
    if _all_neg_inf_rows(plan, result.partial_lse):
        found.append("all-neg-inf-group")
    if case.has_fp8:
        as_bf16 = {**kwargs, "q_dtype": torch.bfloat16, "kv_dtype": torch.bfloat16}
        try:
            differs = not plans_equal(plan, plan_persistent_decode(**as_bf16))
        except PlanError:
            differs = True
        if differs:
            found.append("bf16-plan-differs")
    occupancy = get_profile(case.arch).occupancy
    if 0 < int(plan.params["num_splits"]) < case.num_cus * occupancy:
        found.append("capped")
    return found
