"""The ``flashinfer`` backend's wiring, against a CPU stand-in for ``flashinfer.mla``.

The stand-in (fake_flashinfer.py) checks the arguments as FlashInfer does and computes its
kernel's arithmetic with a base-2 LSE; these tests prove what the backend passes (shapes,
dtypes, sm_scale, the kv scale as ckv/kpe scales), that it converts the LSE to the natural
log, and that it passes the numerics contract on every case it declares.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from backends import flashinfer_backend as fib
from backends import registry
from conformance.goldens import GoldenCase, GoldenStore, load_golden
from conformance.goldens.assertions import assert_result_matches, run_decode
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.stubs.protocol import MLAAttentionLayer

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[3]
NUMERICS = REPO / "tests" / "conformance" / "test_numerics.py"
LAYER = "model.layers.0.self_attn.attn"
FP8_KV = "gfx950-h32-bf16q-fp8kv-q1-p1-cu256-vllm46997"
BF16 = "tiny-triton-h16-bf16-q2-p16-cu132-padded"


def _load_fake():
    name = "mla_selftest_fake_flashinfer"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("fake_flashinfer.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


fake = _load_fake()


class CpuFlashInfer(fib.FlashInferBackend):
    """The backend, on the CPU over the stand-in."""

    name: ClassVar[str] = "flashinfer-on-fake"

    def availability(self):
        return fib.Availability(True)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> CpuFlashInfer:
    monkeypatch.setitem(sys.modules, "flashinfer", fake.module())
    fake.CALLS.clear()
    return CpuFlashInfer()


def _decode(backend: CpuFlashInfer, case_id: str):
    golden = load_golden(GoldenStore(), case_id)
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=golden.case.heads)
    builder = backend.make_builder(golden.builder_config("cpu"), [LAYER], {LAYER: layer})
    decode = builder.build(golden.cam("cpu")).decode
    return golden, decode, run_decode(backend, golden, decode)


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
    golden, decode, (out, lse) = _decode(backend, FP8_KV)
    assert isinstance(decode.scheduler, fib.FlashInferSchedule) and decode.plan is None
    (init,) = _calls("init")
    assert init["backend"] == "fa2" and init["workspace"] == fib.WORKSPACE_BYTES
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
    golden, decode, (out, lse) = _decode(backend, BF16)
    assert golden.case.pad_rows and len(decode.query_start_loc) > golden.case.batch + 1
    (plan,) = _calls("plan")
    assert len(plan["metadata"].qo_indptr) == golden.case.batch + 1  # padding dropped
    (run,) = _calls("run")
    assert run["ckv_scale"] is None and run["kpe_scale"] is None
    assert_result_matches(
        out=out, lse=lse, golden=golden, backend=backend, record=lambda *a: None, what="decode"
    )


def test_the_lse_is_converted_from_base_2(backend: CpuFlashInfer) -> None:
    golden, _, (_, lse) = _decode(backend, FP8_KV)
    finite = torch.isfinite(golden["lse"])
    ratio = (lse[finite] / golden["lse"][finite]).mean()
    assert abs(float(ratio) - 1.0) < 1e-3, "natural-log LSE expected"
    assert math.isclose(fib.LN2, math.log(2.0))


def _numerics_run(pytester, monkeypatch, backend) -> pytest.RunResult:
    real = registry.get_backend
    monkeypatch.setattr(
        registry, "get_backend", lambda n: backend if n == backend.name else real(n)
    )
    return pytester.runpytest_inprocess(
        str(NUMERICS),
        f"--backend={backend.name}",
        "-p",
        "no:cacheprovider",
        "-rfs",
        "-k",
        "decode_matches",
    )


def test_it_passes_the_numerics_contract_on_what_it_declares(pytester, monkeypatch, backend):
    result = _numerics_run(pytester, monkeypatch, backend)
    cases = [GoldenCase.from_json(e.case) for e in GoldenStore().read_manifest().entries.values()]
    claimed = [c for c in cases if not backend.dtype_skip(c.q_torch_dtype, c.kv_torch_dtype)]
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == len(claimed) >= 8, outcomes
    assert outcomes.get("skipped") == len(cases) - len(claimed)
    result.stdout.fnmatch_lines(["*not applicable: flashinfer-on-fake declares q_dtypes=(bf16)*"])


def test_an_unconverted_lse_fails_the_numerics_contract(pytester, monkeypatch, backend):
    class KeepsBase2(CpuFlashInfer):
        name: ClassVar[str] = "flashinfer-base2"

        def decode_scaled(self, q, kv_cache, decode, scales):
            out, lse = super().decode_scaled(q, kv_cache, decode, scales)
            return out, lse / fib.LN2

    result = _numerics_run(pytester, monkeypatch, KeepsBase2())
    failed = {
        m.group(1) for line in result.outlines if (m := re.match(r"^FAILED .*\[(.+)\]", line))
    }
    assert FP8_KV in failed and BF16 in failed
    result.stdout.fnmatch_lines([f"*{FP8_KV} decode (own metadata) lse: MISMATCH*"])
