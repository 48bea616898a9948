"""Self-tests of the benchmark's FlashInfer peer against a stand-in ``flashinfer`` module.

The stand-in (tests/selftest/support/fake_flashinfer.py, shared with the backend's tests)
records every call the peer makes and computes MLA decode as FlashInfer's FA backends define
it, with FlashInfer's LSE convention (base 2 unless ``return_lse_base_on_e``). The tests check
the call wiring (arguments, dtypes, scales, CUDA-graph buffers) on CPU inputs, that the
stand-in's output passes the benchmark's output check, (negative controls) that a peer
dropping the fp8 scale or reading another page table is marked wrong, and one whole case of
the benchmark on the CPU (ours and the in-repo peers under Triton's interpreter, the stand-in
as FlashInfer, a stand-in timer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks.decode import flashinfer_peer as fp
from benchmarks.decode.cases import PAGE_SIZE, SM_SCALE, Case
from benchmarks.decode.inputs import Batch, make_batch, reference_rows
from benchmarks.decode.record import errors, wrong_reason

import fake_flashinfer as fake

FAKE_PATH = Path(fake.__file__)
ROOT = Path(__file__).resolve().parents[3]
FakeWrapper = fake.BatchMLAPagedAttentionWrapper


@pytest.fixture
def fake_mla(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The stand-in ``flashinfer`` package in ``sys.modules`` (undone after the test)."""
    for name in ("flashinfer", "flashinfer.mla"):
        monkeypatch.setitem(sys.modules, name, None)  # restored (or removed) afterwards
    monkeypatch.setattr(FakeWrapper, "fault", None)
    return fake.install()


def _peer(mla: Any) -> fp.FlashInferPeer:
    loaded, version = fp.load()
    assert loaded is mla and version == fake.VERSION
    return fp.FlashInferPeer(loaded, version, "cpu")


def _batch(kv_format: str, q_len: int = 1) -> Batch:
    return make_batch(Case(16, kv_format, 3, 150, q_len), "cpu", seed=3)


def test_load_without_flashinfer_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import raises ImportError
    mla, reason = fp.load()
    assert mla is None and "flashinfer does not import" in reason


def test_load_rejects_a_flashinfer_without_the_mla_wrapper(
    fake_mla: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(fake_mla, "BatchMLAPagedAttentionWrapper")
    mla, reason = fp.load()
    assert mla is None and "BatchMLAPagedAttentionWrapper" in reason


@pytest.mark.parametrize("backend", fp.BACKENDS)
@pytest.mark.parametrize("kv_format", ["bf16", "fp8"])
def test_wiring_passes_our_inputs_dtypes_and_scale(
    fake_mla: Any, backend: str, kv_format: str
) -> None:
    batch = _batch(kv_format)
    impl = _peer(fake_mla).impl(batch, backend)
    (wrapper,) = FakeWrapper.instances
    assert wrapper.init["backend"] == backend and wrapper.init["use_cuda_graph"] is True
    assert wrapper.init["workspace"].numel() == fp.WORKSPACE_BYTES
    (plan,) = wrapper.plans
    meta = plan["metadata"]
    for name, ours in (
        ("qo_indptr", batch.qo_indptr),
        ("kv_indptr", batch.kv_indptr),
        ("kv_indices", batch.kv_indices),
        ("kv_len_arr", batch.seq_lens),
    ):
        got = getattr(meta, name)
        assert got.dtype == torch.int32 and torch.equal(got, ours.to(torch.int32)), name
        reserved = wrapper.init[name]  # the CUDA-graph buffer FlashInfer copies into
        assert reserved.dtype == torch.int32 and reserved.shape == got.shape, name
    fp8 = kv_format == "fp8"
    expected = {
        "num_heads": 16,
        "head_dim_ckv": 512,
        "head_dim_kpe": 64,
        "page_size": PAGE_SIZE,
        "causal": True,
        "sm_scale": SM_SCALE,
        "q_data_type": torch.bfloat16,
        "kv_data_type": torch.float8_e4m3fn if fp8 else torch.bfloat16,
        "lse_mode": "basee",
        "scale_mode": "kv-per-tensor" if fp8 else "default",
    }
    assert {k: plan[k] for k in expected} == expected
    assert wrapper.runs == []  # planning does not run
    impl.run()
    (run,) = wrapper.runs
    assert run["query"] is batch.q_bf16 and run["query"].dtype == torch.bfloat16
    assert run["query"].shape == (3, 16, 576)
    assert run["kv_cache"] is batch.kv_cache and run["kv_cache"].shape[1:] == (PAGE_SIZE, 576)
    assert run["return_lse"] is True and run["return_lse_base_on_e"] is True
    assert run["out"].shape == (3, 16, 512) and run["out"].dtype == torch.bfloat16
    assert run["lse"].shape == (3, 16) and run["lse"].dtype == torch.float32
    scales = {k: run[k] for k in ("ckv_scale", "kpe_scale") if k in run}
    assert scales == ({"ckv_scale": batch.kv_scale, "kpe_scale": batch.kv_scale} if fp8 else {})
    assert impl.info == {"flashinfer": fake.VERSION, "backend": backend}


def test_fp8_q_handed_over_is_the_exact_dequantisation_of_ours(fake_mla: Any) -> None:
    batch = _batch("fp8")
    assert batch.q.dtype == torch.float8_e4m3fn and batch.q_scale != 1.0
    assert torch.equal(batch.q_bf16.float(), batch.q.float() * batch.q_scale)


def test_unknown_backend_is_rejected_by_name(fake_mla: Any) -> None:
    with pytest.raises(ValueError, match="'cutlass'"):
        _peer(fake_mla).impl(_batch("bf16"), "cutlass")


def _checked(batch: Batch, impl: Any) -> dict[str, Any]:
    rows, ref_out, ref_lse = reference_rows(batch, [0, batch.case.batch - 1])
    out, lse = impl.outputs(impl.run())
    result = errors(out, lse, rows, ref_out, ref_lse)
    return result | {"wrong": wrong_reason(result, float(ref_out.abs().max()))}


@pytest.mark.parametrize("kv_format,q_len", [("bf16", 1), ("fp8", 1), ("bf16", 2)])
def test_a_right_peer_passes_the_output_check(fake_mla: Any, kv_format: str, q_len: int) -> None:
    batch = _batch(kv_format, q_len)
    result = _checked(batch, _peer(fake_mla).impl(batch, "fa3"))
    assert result["wrong"] is None, result
    assert result["max_lse_err"] < 1e-3


@pytest.mark.parametrize("fault,kv_format", [("drop_scale", "fp8"), ("shift_pages", "bf16")])
def test_a_wrong_peer_is_marked_wrong(fake_mla: Any, fault: str, kv_format: str) -> None:
    FakeWrapper.fault = fault
    batch = _batch(kv_format)
    result = _checked(batch, _peer(fake_mla).impl(batch, "fa3"))
    assert result["wrong"] is not None and (
        "vs the fp32 reference" in result["wrong"] or "NaN" in result["wrong"]
    ), result


CASE_SCRIPT = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("fake_flashinfer", sys.argv[1])
fake = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fake)
mla = fake.install()
from benchmarks.decode import flashinfer_peer, record
from benchmarks.decode.cases import Case
from benchmarks.roofline import Ceilings

def timer(run):
    run()
    return {"us": 10.0, "graph": False}

peer = flashinfer_peer.FlashInferPeer(mla, fake.VERSION, "cpu")
out = record.run_case(
    Case(16, "fp8", 2, 150, 2), ceilings=Ceilings(4e12, 6e14), timer=timer, num_sms=4,
    impls=["triton", "flashinfer_fa3", "flashinfer_fa2", "baseline", "sdpa"],
    flashinfer=peer, device="cpu",
)
print(json.dumps(out, default=str))
"""


def test_one_case_of_the_benchmark_end_to_end_on_the_cpu() -> None:
    pytest.importorskip("triton", reason="the suite's kernels need triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CASE_SCRIPT, str(FAKE_PATH)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("triton", "flashinfer_fa3", "flashinfer_fa2", "baseline", "sdpa"):
        assert "wrong" not in record[name] and "skipped" not in record[name], record[name]
        assert record[name]["fraction_of_floor"] > 0
    for name in ("flashinfer_fa3", "flashinfer_fa2", "baseline", "sdpa"):
        assert record[f"ours_over_{name}"] == 1.0  # the stand-in timer: 10 µs each
        assert record[name]["max_diff_vs_ours"] < 0.25 * record["ref_max_abs"]
    assert record["flashinfer_fa3"]["backend"] == "fa3"
    assert record["plan"]["num_works"] > 0 and record["floor"]["bound"] == "memory"
