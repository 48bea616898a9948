"""The plan contract, for backends declaring the AITER v1 plan format (``aiter-v1``).

For such a backend, against the goldens' exact reference plans (`conformance.goldens`):

- its builder's plan equals the golden plan on every written region and passes the
  invariants (cases whose arch, and CU count, it plans for), and a natively made plan
  passes the backend's own check against the reference planner;
- the planner call its builder makes, replayed with the run's dtypes forced, gives the
  same buffers (vLLM's fp8 golden test, #46997), for cases with an fp8 q or cache;
- the decode output stays within the numerics tolerance when the plan is made for
  another CU count (plan invariance).

A backend declaring ``plan_format = None`` has every case reported not applicable, with
its declaration as the reason; so are, for every backend, the fp8 replay of a bf16 case and
the plan invariance of a case no CAM expresses. The harness decides and skips them
(`conformance.applicability`), never a test body. Test bodies never name a backend.
"""

from __future__ import annotations

from typing import Any

import torch

from backends.base import Backend
from conformance.goldens.assertions import Capabilities, assert_same_plan
from conformance.goldens.record import plans_equal
from conformance.persistent import check_inputs, check_plan, plan_persistent_decode


def _built_plan(golden, build):
    decode = build()
    assert decode.plan is not None, (
        f"case {golden.case.id}: the builder attached no work plan to its decode metadata "
        f"(the backend declares the AITER v1 plan format)"
    )
    return decode


def test_plan_matches_golden(plan_id: str, backend: Backend, goldens, golden_builder) -> None:
    golden = goldens(plan_id)
    case = golden.case
    decode = _built_plan(golden, golden_builder(golden)[1])
    for name in ("kv_indptr", "kv_indices", "kv_last_page_lens"):
        got, want = getattr(decode, name).cpu(), golden[name]
        assert torch.equal(got.to(torch.int32), want), (
            f"case {case.id}: the builder's {name} {got.tolist()[:16]} differs from the "
            f"golden's {want.tolist()[:16]}"
        )
    assert_same_plan(
        actual=decode.plan,
        expected=golden.plan(),
        case_id=case.id,
        what="the backend's plan",
        against="the golden plan",
    )
    native = backend.native_plan_check(decode)  # None: planned with the reference planner
    assert not native, f"case {case.id}: the native plan differs from the reference:\n" + (
        "\n".join(f"  {p}" for p in native or [])
    )
    batch = check_inputs(golden.planner_call(), scalars=True)  # the case's batch and scalars
    violations = check_plan(decode.plan.to("cpu"), **batch)
    assert not violations, f"case {case.id}: the backend's plan breaks invariants:\n" + "\n".join(
        f"  {v}" for v in violations
    )


def test_planner_call_replays_with_fp8_dtypes(spy_id: str, goldens, golden_builder) -> None:
    """vLLM's fp8 golden: the builder's planner call, replayed with the run's dtypes."""
    golden = goldens(spy_id)
    case = golden.case
    builder, build = golden_builder(golden)
    calls: list[tuple[tuple, dict]] = []
    planner = builder.planner

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, dict(kwargs)))
        return planner(*args, **kwargs)

    builder.planner = spy
    decode = _built_plan(golden, build)
    assert len(calls) == 1, f"case {case.id}: the builder called its planner {len(calls)} times"
    args, kwargs = calls[0]
    forced = {**kwargs, "q_dtype": case.q_torch_dtype, "kv_dtype": case.kv_torch_dtype}
    replay = planner(*args, **forced)
    passed = {k: kwargs.get(k) for k in ("q_dtype", "kv_dtype")}
    assert_same_plan(
        actual=decode.plan,
        expected=replay,
        case_id=case.id,
        what=f"the builder's plan (planner called with {passed})",
        against="the replay with the run's dtypes",
    )


def test_decode_is_plan_invariant(
    replan_id: str, backend: Backend, goldens, golden_builder, assert_decode_matches
) -> None:
    """Another CU count gives another plan; the output stays within the derived bound.

    With bf16 q the result does not depend on the plan beyond fp32 rounding. With fp8 q,
    P is rounded to fp8 against each split's own max, so the result depends on the split
    layout: the bound is the triangle-inequality one of `output_tolerance` (backend vs
    fp64 reference plus golden vs fp64 reference), which holds for any plan.
    """
    golden = goldens(replan_id)
    case = golden.case
    if Capabilities.of(backend).plans(case, case.alt_num_cus):
        decode = _built_plan(golden, golden_builder(golden, num_cus=case.alt_num_cus)[1])
        plan = decode.plan
    else:
        plan = plan_persistent_decode(**{**golden.planner_call(), "num_cus": case.alt_num_cus})
        decode = golden.decode_metadata(backend.device, plan=plan)
    assert not plans_equal(plan, golden.plan()), (
        f"case {case.id}: the plan for {case.alt_num_cus} CUs equals the golden plan "
        f"({case.num_cus} CUs); the check would compare a plan with itself"
    )
    assert_decode_matches(golden, decode, f"decode planned for {case.alt_num_cus} CUs")
