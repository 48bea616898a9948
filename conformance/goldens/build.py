"""Building one golden: the reference plan and result, checked before anything is written.

For a `GoldenCase` (one thread, fixed seeds): the inputs of `conformance.goldens.inputs`,
the plan of the reference planner called with what a builder passes, and output and LSE
from `kernels.plan_exec.execute_plan` on the NaN-poisoned paged cache (fp32, work by work,
AITER semantics: P rounded to fp8 when q is fp8).

A golden is refused (`GenerationError`) unless the plan passes the invariants, the result
agrees with the fp64 monolithic reference `kernels.reference.mla_decode_reference` within
its `GoldenBound`, the plan shows every feature the case expects, and the plan for the
case's ``alt_num_cus`` differs from it (its split layout too, when it splits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.errors import ConformanceError, PlanError
from conformance.goldens.cases import GoldenCase
from conformance.goldens.features import plan_features
from conformance.goldens.inputs import Inputs, make_inputs, planner_kwargs
from conformance.goldens.record import KV_LORA_RANK, PLAN_SCALARS, plans_equal, same_works
from conformance.goldens.tolerance import (
    GOLDEN_FP32_LSE,
    BoundCheck,
    check_bound,
    golden_output_bound,
)
from conformance.persistent.invariants import check_plan
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from conformance.persistent.planner import plan_persistent_decode
from kernels.plan_exec import PlanOutput, execute_plan
from kernels.reference import mla_decode_reference

GENERATOR_VERSION = "1"
"""Bump when generation changes in a way that changes the files."""


class GenerationError(ConformanceError):
    """A golden could not be generated or failed its checks; names the case."""


@dataclass
class GoldenData:
    """A generated golden, checked, ready to be written."""

    case: GoldenCase
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any]
    provenance: dict[str, Any] = field(default_factory=dict)


def _json_call(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The planner call without its tensors, dtypes as names."""
    call = {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}
    call["q_dtype"] = str(call["q_dtype"])
    call["kv_dtype"] = str(call["kv_dtype"])
    return call


def _fail(case: GoldenCase, message: str) -> GenerationError:
    return GenerationError(f"golden {case.id}: {message}; refusing to write it")


def _checked_plan(case: GoldenCase, inputs: Inputs, kwargs: dict[str, Any]) -> WorkPlan:
    """The reference plan, required to pass the invariants."""
    try:
        plan = plan_persistent_decode(**kwargs)
    except PlanError as exc:
        raise _fail(case, f"the reference planner refused the case: {exc}") from None
    violations = check_plan(
        plan,
        qo_indptr=inputs.query_start_loc,
        kv_indptr=inputs.kv_indptr,
        kv_last_page_lens=inputs.kv_last_page_lens,
        page_size=case.page_size,
        causal=case.planner_causal,
    )
    if violations:
        raise _fail(case, "plan breaks invariants: " + "; ".join(map(str, violations)))
    return plan


def _checked_result(
    case: GoldenCase, inputs: Inputs, plan: WorkPlan
) -> tuple[PlanOutput, BoundCheck, BoundCheck]:
    """The plan replay, required to agree with the fp64 monolithic reference."""
    cache = inputs.cache(case.page_size)
    common: dict[str, Any] = {
        "sm_scale": case.sm_scale,
        "q_scale": inputs.q_scale,
        "kv_scale": inputs.kv_scale,
        "causal": case.causal,
        "kv_lora_rank": KV_LORA_RANK,
    }
    result = execute_plan(
        plan,
        inputs.q,
        cache,
        kv_indptr=inputs.kv_indptr,
        kv_indices=inputs.kv_indices,
        kv_last_page_lens=inputs.kv_last_page_lens,
        page_size=case.page_size,
        **common,
    )
    ref_out, ref_lse = mla_decode_reference(
        inputs.q,
        cache,
        query_start_loc=inputs.query_start_loc,
        seq_lens=inputs.seq_lens,
        block_table=inputs.block_table,
        **common,
    )
    if bool(torch.isnan(result.out).any()) or bool(torch.isnan(result.lse).any()):
        raise _fail(case, "the plan replay left NaN in the output or LSE")
    bound = golden_output_bound(case.q_torch_dtype, case.kv_torch_dtype, score_rms=case.score_rms)
    out_check = check_bound(result.out, ref_out, bound)
    if not out_check.ok:
        raise _fail(case, f"output disagrees with the fp64 reference: {out_check.problem}")
    lse_check = check_bound(result.lse, ref_lse, GOLDEN_FP32_LSE)
    if not lse_check.ok:
        raise _fail(case, f"LSE disagrees with the fp64 reference: {lse_check.problem}")
    return result, out_check, lse_check


def _checked_alt_plan(
    case: GoldenCase, kwargs: dict[str, Any], plan: WorkPlan, features: list[str]
) -> tuple[WorkPlan, bool]:
    """The plan for ``alt_num_cus``, required to differ (in its works when split)."""
    alt = plan_persistent_decode(**{**kwargs, "num_cus": case.alt_num_cus})
    changes_works = not same_works(plan, alt)
    if plans_equal(plan, alt) or ("split" in features and not changes_works):
        what = "split layout" if "split" in features else "plan"
        raise _fail(
            case,
            f"the plan for alt_num_cus={case.alt_num_cus} does not change the {what}; the "
            f"plan-invariance check would compare the golden plan with itself",
        )
    return alt, changes_works


def build_golden(case: GoldenCase) -> GoldenData:
    """Generate and check one golden (see the module docstring); nothing is written."""
    problems = case.problems()
    if problems:
        raise _fail(case, "; ".join(problems))
    inputs = make_inputs(case)
    kwargs = planner_kwargs(case, inputs)
    plan = _checked_plan(case, inputs, kwargs)
    result, out_check, lse_check = _checked_result(case, inputs, plan)
    features = plan_features(case, kwargs, plan, result)
    missing = [f for f in case.expect if f not in features]
    if missing:
        raise _fail(case, f"the plan lacks the expected features {missing} (it shows {features})")
    alt, alt_changes_works = _checked_alt_plan(case, kwargs, plan, features)

    tensors: dict[str, torch.Tensor] = {
        "q": inputs.q,
        "kv_tokens": inputs.kv_tokens,
        "query_start_loc": inputs.query_start_loc,
        "seq_lens": inputs.seq_lens,
        "block_table": inputs.block_table,
        "kv_indptr": inputs.kv_indptr,
        "kv_indices": inputs.kv_indices,
        "kv_last_page_lens": inputs.kv_last_page_lens,
        **{f"plan.{name}": getattr(plan, name) for name in PLAN_BUFFERS},
        "out": result.out.to(torch.float32),
        "lse": result.lse.to(torch.float32),
    }
    meta: dict[str, Any] = {
        "generator_version": GENERATOR_VERSION,
        "case": case.to_json(),
        "num_blocks": inputs.num_blocks,
        "sm_scale": case.sm_scale,
        "q_scale": inputs.q_scale,
        "kv_scale": inputs.kv_scale,
        "plan": {
            **{key: int(getattr(plan, key)) for key in PLAN_SCALARS},
            "params": plan.params,
        },
        "planner_call": _json_call(kwargs),
    }
    provenance = {
        "generator_version": GENERATOR_VERSION,
        "features": features,
        "num_works": plan.num_works,
        "num_split_tiles": len(plan.split_tiles()),
        "alt_plan": {
            "num_cus": case.alt_num_cus,
            "num_works": alt.num_works,
            "num_split_tiles": len(alt.split_tiles()),
            "works_differ": alt_changes_works,
        },
        "vs_fp64_reference": {
            "out_max_abs_err": out_check.max_abs_err,
            "out_cos_diff": out_check.cos_diff,
            "out_bound_ratio": out_check.worst_ratio,
            "lse_max_abs_err": lse_check.max_abs_err,
        },
    }
    return GoldenData(case, tensors, meta, provenance)
