"""Family C on vLLM: ROCM_AITER_MLA's real builder plans through the suite's AITER stand-in."""

from __future__ import annotations

import pytest
import torch

from conformance.engines import checks
from conformance.engines.vllm.adapter import VllmEngine, standin, write_model_config
from conformance.goldens.record import load_golden, plans_equal
from conformance.goldens.store import GoldenStore, default_root
from conformance.metadata.batch import BatchSpec

FP8_GOLDENS = ["gfx942-h16-fp8-q1-p1-cu304-b64"]  # fp8 q and cache, page 1, one q token


def _plan_call(workdir, golden):
    model = workdir / f"model-h{golden.case.heads}"
    write_model_config(model, heads=golden.case.heads)
    engine = VllmEngine(model, cache_dtype="fp8", block_size=1)
    aiter = standin()
    aiter.arch, aiter.num_cus = golden.case.arch, golden.case.num_cus
    built = engine.construct("ROCM_AITER_MLA", engine.layers())
    case = golden.case
    spec = BatchSpec(tuple(case.seq_lens), (case.q_len,) * len(case.seq_lens), case.id)
    before = len(aiter.calls)
    engine.build(built, engine.record(spec))
    assert len(aiter.calls) == before + 1, "the builder did not call get_mla_metadata_v1"
    return aiter.calls[-1]


@pytest.mark.parametrize("case_id", FP8_GOLDENS)
def test_planner_call_carries_fp8_and_plan_equals_golden(workdir, case_id) -> None:
    golden = load_golden(GoldenStore(default_root()), case_id)
    call = _plan_call(workdir, golden)
    expected = golden.planner_call()
    assert not checks.planner_dtype_problems(
        call.arguments, expected["q_dtype"], expected["kv_dtype"]
    )
    assert plans_equal(call.plan, golden.plan()), f"vLLM's plan differs from {case_id}"


@pytest.mark.negative_control
def test_planner_call_without_fp8_dtypes_fails_naming_them(workdir) -> None:
    """The real call with its dtypes dropped (#46997) is caught, naming dtype_q and dtype_kv."""
    golden = load_golden(GoldenStore(default_root()), FP8_GOLDENS[0])
    call = _plan_call(workdir, golden)
    stripped = {k: v for k, v in call.arguments.items() if k not in ("dtype_q", "dtype_kv")}
    problems = checks.planner_dtype_problems(
        stripped, golden.case.q_torch_dtype, torch.float8_e4m3fnuz
    )
    assert len(problems) == 2 and "dtype_q" in problems[0] and "dtype_kv" in problems[1]


def test_mtp_golden_of_46997_is_reported_not_run() -> None:
    pytest.skip(
        "gfx950-h32-fp8-q2-p1-cu256-vllm46997 needs two q tokens per request: vLLM's AITER "
        "builder plans them only under a speculative-decoding config, not made here"
    )
