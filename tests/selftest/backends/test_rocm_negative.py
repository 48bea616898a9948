"""Negative controls of the ROCm adapter's wiring, against the AITER stand-in (fake_aiter.py).

Each test patches the adapter to drop a dtype, swap two buffers, omit ``max_seqlen_qo`` or
let AITER's batch gate bypass the persistent kernel, and checks that the suite's checks
reject each one. Stand-in results are never a rocm conformance run
(`standin_never_into_reports`).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from mla_selftest_rocm_wiring import (  # rocm_wiring.py, registered by conftest.py
    SM_SCALE,
    TAIL,
    THREE,
    assert_metadata_call_contract,
    assert_native_plan_conforms,
    assert_persistent_decode,
    build,
    decode_inputs,
    fp8_of,
)

from backends.rocm import decode as rocm_decode
from backends.rocm import planner as rocm_planner
from backends.rocm import probe as rocm_probe
from conformance.errors import BackendUnavailable, PlanError
from conformance.metadata.batch import BatchSpec
from conformance.numerics.fp8 import fp8_dtype_for_arch

pytestmark = pytest.mark.usefixtures("standin_never_into_reports")


# ---------------------------------------------------------------------------------------
# Negative controls: a misbehaving adapter is caught


def assert_dtypes_dropped(standin: Any) -> None:
    """The last ``get_mla_metadata_v1`` call passed no dtype at all (what the patch does)."""
    __tracebackhide__ = True
    kwargs = standin.calls_to("get_mla_metadata_v1")[-1].kwargs
    assert not any(name.startswith("dtype_") for name in kwargs), kwargs


@pytest.mark.parametrize(
    ("arch", "heads", "plan_differs"),
    [
        pytest.param("gfx950", 48, True, id="gfx950-fp8-48h"),
        # vLLM #46997's own case: on gfx950 today bf16 is native too, so the plan comes out
        # the same; only the call-contract check sees the dropped dtype.
        pytest.param("gfx950", 32, False, id="gfx950-fp8-32h"),
    ],
)
def test_a_dropped_dtype_is_caught(
    rocm, monkeypatch: pytest.MonkeyPatch, arch, heads, plan_differs
) -> None:
    backend, standin = rocm(arch, 8)
    monkeypatch.setattr(rocm_planner, "dtype_kwargs", lambda *a, **k: {})
    meta = build(backend, THREE, num_heads=heads, dtype="fp8")
    assert_dtypes_dropped(standin)
    with pytest.raises(AssertionError, match="called without dtype_q_nope"):
        assert_metadata_call_contract(standin, meta)
    problems = backend.native_plan_check(meta.decode)
    assert bool(problems) is plan_differs, problems
    if plan_differs:
        with pytest.raises(AssertionError, match="AITER's plan differs"):
            assert_native_plan_conforms(backend, meta)


@pytest.mark.parametrize("heads", [128, 64])
def test_a_dropped_dtype_that_overflows_work_info_set_fails_the_build(
    rocm, monkeypatch, heads
) -> None:
    """gfx942 fp8 64/128 heads are native; planned as bf16 they fold into more works than
    the (fp8-sized) work_info_set holds: memory corruption on hardware, a read-back error here."""
    backend, standin = rocm("gfx942", 8)
    monkeypatch.setattr(rocm_planner, "dtype_kwargs", lambda *a, **k: {})
    with pytest.raises(PlanError, match=r"work_indptr: AITER wrote \[0, \.\.\., \d+\], expected"):
        build(backend, THREE, num_heads=heads, dtype="fp8")
    assert_dtypes_dropped(standin)
    assert any(entry.startswith("work_info_set") for entry in standin.out_of_bounds)


def test_a_dropped_dtype_fails_the_build_in_check_mode(rocm, monkeypatch) -> None:
    backend, _ = rocm("gfx950", 8)
    monkeypatch.setattr(rocm_planner, "dtype_kwargs", lambda *a, **k: {})
    monkeypatch.setenv(rocm_planner.CHECK_PLAN_ENV, "1")
    with pytest.raises(PlanError, match="MLA_ROCM_CHECK_PLAN=1: AITER's plan differs"):
        build(backend, BatchSpec((300, 40), (1, 1)), num_heads=48, dtype="fp8")


def test_check_mode_passes_a_conforming_plan(rocm, monkeypatch) -> None:
    backend, _ = rocm("gfx942", 8)
    monkeypatch.setenv(rocm_planner.CHECK_PLAN_ENV, "1")
    meta = build(backend, BatchSpec((300, 40), (1, 1)), num_heads=128, dtype="fp8")
    assert meta.decode is not None and meta.decode.plan.num_works > 0


def test_swapped_buffers_are_caught_by_the_pointer_table(rocm, monkeypatch) -> None:
    backend, _ = rocm("gfx942", 8)
    correct = rocm_planner.metadata_args

    def swapped(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        made = list(correct(*args, **kwargs))
        made[7], made[8] = made[8], made[7]  # work_indptr before work_info_set: the info order
        return tuple(made)

    monkeypatch.setattr(rocm_planner, "metadata_args", swapped)
    with pytest.raises(PlanError, match=r"work_metadata_ptrs\[0\]: expected work_indptr"):
        build(backend, BatchSpec((90, 20), (1, 1)))


def test_a_missing_max_seqlen_qo_is_caught(rocm, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, standin = rocm("gfx942", 4)
    correct = rocm_planner.metadata_kwargs

    def without_max_seqlen(**kwargs: Any) -> dict[str, Any]:
        made = correct(**kwargs)
        del made["max_seqlen_qo"]  # AITER's default -1: no tail threshold (#2106)
        return made

    monkeypatch.setattr(rocm_planner, "metadata_kwargs", without_max_seqlen)
    meta = build(backend, TAIL)
    with pytest.raises(AssertionError, match="called without max_seqlen_qo"):
        assert_metadata_call_contract(standin, meta)
    problems = backend.native_plan_check(meta.decode)
    assert any(p.startswith("work_info_set") for p in problems), problems


def test_a_stale_pointer_table_is_refused_at_decode(rocm) -> None:
    backend, _ = rocm()
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec)
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=1)
    meta.decode.plan.work_indptr = meta.decode.plan.work_indptr.clone()
    with pytest.raises(PlanError, match=r"work_metadata_ptrs\[0\]"):
        backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    assert backend.native_plan_check(meta.decode) != []


def test_decoding_another_dtype_than_planned_is_refused(rocm) -> None:
    backend, _ = rocm("gfx942")
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec)  # planned for bf16
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=1)
    fp8 = fp8_of(backend)
    with pytest.raises(ValueError, match="vLLM #46997"):
        backend.decode(q.to(fp8), cache.to(fp8), meta.decode, sm_scale=SM_SCALE)


GATED = BatchSpec((20,) * 32, (1,) * 32)  # gfx950 bf16 16 heads S=1 batch 32: AITER's gate


def test_gated_batches_still_take_the_persistent_path(rocm) -> None:
    backend, standin = rocm("gfx950", 8)
    meta = build(backend, GATED)
    q, cache = decode_inputs(meta, GATED, num_heads=16, block_size=1)
    backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    assert_persistent_decode(standin)


def test_a_gate_aiter_reread_after_the_probe_is_refused_at_decode(rocm, monkeypatch) -> None:
    backend, standin = rocm("gfx950", 8)
    meta = build(backend, GATED)
    q, cache = decode_inputs(meta, GATED, num_heads=16, block_size=1)
    monkeypatch.setenv(rocm_probe.PERSISTENT_GATE_ENV, "32")
    standin._gate = None  # as if AITER's lru_cache had been cleared
    with pytest.raises(BackendUnavailable, match="AITER_MLA_DECODE_PERSISTENT_MAX_BATCH=32"):
        backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)


def test_an_adapter_without_the_gate_pin_is_caught(rocm, monkeypatch) -> None:
    backend, standin = rocm("gfx950", 8)
    for module, name in (
        (rocm_probe, "_pin_persistent_gate"),
        (rocm_probe, "_gate_read_by_aiter"),
        (rocm_decode, "persistent_gate_problem"),
    ):
        monkeypatch.setattr(module, name, lambda *a: None)
    monkeypatch.delenv(rocm_probe.PERSISTENT_GATE_ENV)  # AITER's default: 32
    meta = build(backend, GATED)
    q, cache = decode_inputs(meta, GATED, num_heads=16, block_size=1)
    backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    with pytest.raises(AssertionError, match="non-persistent"):
        assert_persistent_decode(standin)


def test_standin_plans_bf16_when_dtypes_are_omitted_like_aiter(rocm) -> None:
    """The stand-in's None-means-bf16: omitted dtypes plan exactly like explicit bf16."""
    _, standin = rocm("gfx942", 8)
    aiter = standin.modules["aiter"]
    qo = torch.tensor([0, 1, 2], dtype=torch.int32)
    kv = torch.tensor([0, 300, 340], dtype=torch.int32)
    last = torch.ones(2, dtype=torch.int32)
    fp8 = fp8_dtype_for_arch("gfx942")
    results = []
    for dtypes in (
        {},
        {"dtype_q_nope": torch.bfloat16, "dtype_kv_nope": torch.bfloat16},
        {"dtype_q": fp8, "dtype_kv": fp8},
    ):
        sizes = aiter.get_mla_metadata_info_v1(2, 1, 128, fp8, fp8, False)
        buffers = [torch.full((s,) if isinstance(s, int) else s, -1, dtype=d) for s, d in sizes]
        ptrs, wi, wis, ri, rfm, rpm = buffers
        positional = (qo, kv, last, 128, 1, True, ptrs, wis, wi, ri, rfm, rpm)
        aiter.get_mla_metadata_v1(*positional, max_seqlen_qo=1, uni_seqlen_qo=1, **dtypes)
        results.append((int(wi[-1]), wis.clone()))
    omitted, bf16, fp8_plan = results
    assert omitted[0] == bf16[0] and torch.equal(omitted[1], bf16[1])
    assert omitted[0] != fp8_plan[0]  # 128 heads: folded by 8 for bf16, native for fp8
