"""The ``flashinfer`` backend's wiring, against a CPU stand-in for ``flashinfer.mla``.

The stand-in (tests/selftest/support/fake_flashinfer.py, shared with the benchmark's tests)
checks the arguments as FlashInfer does and computes its kernel's arithmetic with FlashInfer's
LSE convention (base 2 unless the natural log is asked for). These tests prove what the
backend passes (shapes, dtypes, sm_scale, the kv scale as ckv/kpe scales), that it converts
the LSE to the natural log, and that it passes the numerics contract on every case it
declares.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import ClassVar

import pytest
import torch

from backends import flashinfer_backend as fib
from backends import registry
from conformance.goldens.assertions import assert_result_matches

import fake_flashinfer as fake
from backend_under_test import (
    OnCpu,
    assert_passes_what_it_declares,
    decode_golden,
    failed_cases,
    run_numerics,
)

pytestmark = pytest.mark.selftest

FP8_KV = "gfx950-h32-bf16q-fp8kv-q1-p1-cu256-vllm46997"
BF16 = "tiny-triton-h16-bf16-q2-p16-cu132-padded"


class CpuFlashInfer(OnCpu, fib.FlashInferBackend):
    """The backend, on the CPU over the stand-in."""

    name: ClassVar[str] = "flashinfer-on-fake"


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> CpuFlashInfer:
    for name in ("flashinfer", "flashinfer.mla"):
        monkeypatch.setitem(sys.modules, name, None)  # restored (or removed) afterwards
    fake.install()
    return CpuFlashInfer()


def _calls(kind: str) -> list[dict]:
    return [args for name, args in fake.CALLS if name == kind]


def test_declaration_claims_bf16_q_with_bf16_or_e4m3fn_kv() -> None:
    backend = fib.FlashInferBackend()
    assert backend.plan_format is None and not backend.check_declaration()
    assert backend.dtype_skip(torch.float8_e4m3fn, torch.float8_e4m3fn).startswith(
        "not applicable: flashinfer declares q_dtypes=(bf16)"
    )
    assert backend.dtype_skip(torch.bfloat16, torch.float8_e4m3fnuz) is not None
    assert backend.dtype_skip(torch.bfloat16, torch.float8_e4m3fn) is None


def test_it_is_registered_and_reports_why_it_cannot_run_here() -> None:
    assert "flashinfer" in registry.backend_names()
    avail = registry.get_backend("flashinfer").availability()
    if importlib.util.find_spec("flashinfer") is None:
        assert not avail.available and "flashinfer-python" in avail.reason


def test_fp8_cache_plan_and_run_arguments(backend: CpuFlashInfer) -> None:
    golden, decode, (out, lse) = decode_golden(backend, FP8_KV)
    assert isinstance(decode.scheduler, fib.FlashInferSchedule) and decode.plan is None
    (init,) = _calls("init")
    assert init["backend"] == "fa2" and init["workspace"].numel() == fib.WORKSPACE_BYTES
    (plan,) = _calls("plan")
    case = golden.case
    assert (plan["num_heads"], plan["head_dim_ckv"], plan["head_dim_kpe"]) == (case.heads, 512, 64)
    assert (plan["page_size"], plan["causal"], plan["lse_mode"]) == (case.page_size, True, "base2")
    assert (plan["q_data_type"], plan["kv_data_type"]) == (torch.bfloat16, torch.float8_e4m3fn)
    assert plan["sm_scale"] == golden.sm_scale  # the kv scale is applied by the kernel
    assert torch.equal(plan["metadata"].kv_indptr, golden["kv_indptr"])
    assert plan["metadata"].kv_len_arr.tolist() == list(case.seq_lens)
    (run,) = _calls("run")
    assert run["ckv_scale"] == run["kpe_scale"] == golden.kv_scale
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (case.num_tokens, case.heads, 512)
    assert lse.dtype == torch.float32 and tuple(lse.shape) == (case.num_tokens, case.heads)
    records: list = []
    assert_result_matches(
        out=out,
        lse=lse,
        golden=golden,
        backend=backend,
        record=lambda *a: records.append(a),
        what="decode",
    )


def test_bf16_cache_with_padded_rows_takes_no_kernel_scale(backend: CpuFlashInfer) -> None:
    golden, decode, (out, lse) = decode_golden(backend, BF16)
    assert golden.case.pad_rows and len(decode.query_start_loc) > golden.case.batch + 1
    (plan,) = _calls("plan")
    assert len(plan["metadata"].qo_indptr) == golden.case.batch + 1  # padding dropped
    (run,) = _calls("run")
    assert "ckv_scale" not in run and "kpe_scale" not in run
    assert run["return_lse"] is True and run["return_lse_base_on_e"] is False  # base 2
    assert_result_matches(
        out=out, lse=lse, golden=golden, backend=backend, record=lambda *a: None, what="decode"
    )


def _tiny_wrapper(lse_mode: str):
    mla = fake.install()
    wrapper = mla.BatchMLAPagedAttentionWrapper(torch.empty(8, dtype=torch.uint8))
    i32 = torch.int32
    wrapper.plan(
        metadata=mla.MLAPlanMetadata.csr(
            torch.tensor([0, 1], dtype=i32),
            torch.tensor([0, 2], dtype=i32),
            torch.tensor([0, 1], dtype=i32),
            torch.tensor([3], dtype=i32),
        ),
        num_heads=2,
        head_dim_ckv=512,
        head_dim_kpe=64,
        page_size=2,
        causal=True,
        sm_scale=0.1,
        q_data_type=torch.bfloat16,
        kv_data_type=torch.bfloat16,
        lse_mode=lse_mode,
    )
    generator = torch.Generator().manual_seed(0)
    q = torch.randn((1, 2, 576), generator=generator).to(torch.bfloat16)
    cache = torch.randn((2, 2, 576), generator=generator).to(torch.bfloat16)
    return wrapper, {"query": q, "kv_cache": cache, "return_lse": True}


def test_the_stand_in_follows_flashinfer_s_lse_convention(monkeypatch) -> None:
    """``return_lse=True`` gives the base-2 LSE; the natural log only on request, and the
    plan's ``lse_mode`` must say which (FlashInfer's ``BatchMLAPagedAttentionWrapper.run``)."""
    for name in ("flashinfer", "flashinfer.mla"):
        monkeypatch.setitem(sys.modules, name, None)
    base2, run = _tiny_wrapper("base2")
    _, lse2 = base2.run(**run)
    basee, _ = _tiny_wrapper("basee")
    _, lse_e = basee.run(**run, return_lse_base_on_e=True)
    assert torch.allclose(lse2 * math.log(2.0), lse_e) and not torch.allclose(lse2, lse_e)
    with pytest.raises(ValueError, match="lse_mode='base2'"):
        base2.run(**run, return_lse_base_on_e=True)
    with pytest.raises(ValueError, match="lse_mode='basee'"):
        basee.run(**run)
    with pytest.raises(ValueError, match="lse_mode='none'"):
        _tiny_wrapper("none")[0].run(**run)


def test_the_lse_is_converted_from_base_2(backend: CpuFlashInfer) -> None:
    golden, _, (_, lse) = decode_golden(backend, FP8_KV)
    finite = torch.isfinite(golden["lse"])
    ratio = (lse[finite] / golden["lse"][finite]).mean()
    assert abs(float(ratio) - 1.0) < 1e-3, "natural-log LSE expected"
    assert math.isclose(fib.LN2, math.log(2.0))


def test_it_passes_the_numerics_contract_on_what_it_declares(pytester, monkeypatch, backend):
    result = run_numerics(pytester, monkeypatch, backend)
    assert_passes_what_it_declares(result, backend, at_least=8)
    result.stdout.fnmatch_lines(["*not applicable: flashinfer-on-fake declares q_dtypes=(bf16)*"])


def test_an_unconverted_lse_fails_the_numerics_contract(pytester, monkeypatch, backend):
    class KeepsBase2(CpuFlashInfer):
        name: ClassVar[str] = "flashinfer-base2"

        def decode_scaled(self, q, kv_cache, decode, scales):
            out, lse = super().decode_scaled(q, kv_cache, decode, scales)
            return out, lse / fib.LN2

    result = run_numerics(pytester, monkeypatch, KeepsBase2())
    failed = failed_cases(result)
    assert FP8_KV in failed and BF16 in failed
    result.stdout.fnmatch_lines([f"*{FP8_KV} decode (own metadata) lse: MISMATCH*"])
