"""The ``flashmla`` backend's wiring, against a CPU stand-in for FlashMLA's ops.

The stand-in (tests/selftest/support/fake_flashmla.py) has FlashMLA's positional signatures,
shapes, checks and LSE convention, and walks its own tile schedule. These tests prove what the
backend passes, that it converts FlashMLA's LSE, that it passes the numerics contract on
every case it declares (re-laid in 64-token pages), and that the suite catches each broken
variant: descales dropped, the causal flag off, a page size other than 64 passed through,
``cache_seqlens`` off by one, a stale schedule reused, an unconverted LSE.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from backends import registry
from backends.flashmla import backend as fm
from backends.flashmla import ops as fm_ops
from conformance.goldens import GoldenStore, load_golden
from conformance.goldens.assertions import assert_result_matches, run_decode
from conformance.goldens.relayout import for_backend

import fake_flashmla as fake
from backend_under_test import (
    MASKING,
    OnCpu,
    assert_passes_what_it_declares,
    decode_golden,
    failed_cases,
    run_conformance,
    run_numerics,
)

pytestmark = pytest.mark.selftest

BF16_MTP = "tiny-triton-h16-bf16-q2-p16-cu132-padded"  # page 16, q_len 2, padded rows
BF16_P64 = "tiny-gfx942-h32-bf16-q2-p64-cu304"
FP8 = "tiny-gfx950-h32-fp8-q2-p16-cu256"
FP8_LONG = "gfx950-h32-fp8-q2-p1-cu256-vllm46997"


class CpuFlashMLA(OnCpu, fm.FlashMLABackend):
    """The backend, on the CPU over the stand-in."""

    name: ClassVar[str] = "flashmla-on-fake"


@pytest.fixture(autouse=True)
def stand_in(monkeypatch: pytest.MonkeyPatch):
    fake.CALLS.clear()
    monkeypatch.setattr(fm, "find_ops", lambda: fake.ops())
    yield fake


def _matches(golden, backend, out, lse) -> None:
    assert_result_matches(
        out=out, lse=lse, golden=golden, backend=backend, record=lambda *a: None, what="decode"
    )


def _calls(kind: str) -> list[dict]:
    return [args for name, args in fake.CALLS if name == kind]


def test_declaration_is_flashmla_s_contract() -> None:
    backend = fm.FlashMLABackend()
    assert backend.plan_format is None and not backend.check_declaration()
    assert backend.page_sizes == (64,) and backend.numerics == "tensor-core"
    assert backend.dtype_skip(torch.bfloat16, torch.bfloat16) is None
    assert backend.dtype_skip(torch.float8_e4m3fn, torch.float8_e4m3fn) is None
    reason = backend.dtype_skip(torch.bfloat16, torch.float8_e4m3fn)
    assert reason == (
        "not applicable: flashmla declares dtype_pairs=(bf16/bf16, e4m3fn/e4m3fn), "
        "the case has q bf16 over kv e4m3fn"
    )
    assert "page_sizes=(64)" in backend.declaration()


def test_without_the_e4m3_extension_it_declares_bf16_alone(monkeypatch) -> None:
    monkeypatch.setattr(fm, "find_ops", lambda: fake.ops(fp8=False))
    backend = fm.FlashMLABackend()
    assert backend.dtype_pairs == ((torch.bfloat16, torch.bfloat16),)
    assert backend.dtype_skip(torch.float8_e4m3fn, torch.float8_e4m3fn) is not None


def test_it_is_registered_and_says_in_one_line_why_it_cannot_run(monkeypatch) -> None:
    monkeypatch.undo()  # the real search
    fm_ops.find_ops.cache_clear()
    monkeypatch.delenv(fm_ops.DIR_ENV, raising=False)
    assert "flashmla" in registry.backend_names()
    found = fm_ops.find_ops()
    fm_ops.find_ops.cache_clear()
    if isinstance(found, fm_ops.NotFound):
        avail = registry.get_backend("flashmla").availability()
        assert not avail.available and "\n" not in avail.reason
        assert avail.reason.startswith("FlashMLA not found") or "flash_mla" in avail.reason


def test_a_folder_without_or_with_a_broken_library_is_one_line(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(fm_ops.DIR_ENV, str(tmp_path / "absent"))
    assert fm_ops._from_folder().reason.endswith("absent: not a folder")
    monkeypatch.setenv(fm_ops.DIR_ENV, str(tmp_path))
    assert "no _flashmla_C.abi3.so" in fm_ops._from_folder().reason
    (tmp_path / fm_ops.DENSE_LIB).write_bytes(b"not an ELF file")
    found = fm_ops._from_folder()
    assert isinstance(found, fm_ops.NotFound) and "_flashmla_C.abi3.so does not load: " in (
        found.reason
    )
    assert "\n" not in found.reason


def test_bf16_arguments_and_the_schedule_made_on_the_first_call() -> None:
    backend = CpuFlashMLA()
    golden, decode, (out, lse) = decode_golden(backend, BF16_MTP)
    case = golden.case
    assert case.page_size == 64 and golden.meta["relaid_from_page_size"] == 16
    (call,) = _calls("dense")
    assert tuple(call["q"].shape) == (case.batch, case.q_len, case.heads, 576)
    assert tuple(call["k_cache"].shape[1:]) == (64, 1, 576) and call["head_dim_v"] == 512
    assert call["cache_seqlens"].tolist() == list(case.seq_lens)  # padded rows dropped
    assert call["block_table"].dtype == torch.int32 and call["block_table"].shape[0] == case.batch
    assert call["causal"] is True and call["softmax_scale"] == golden.sm_scale
    assert call["tile_scheduler_metadata"] is None  # made by the first call of the batch
    assert decode.scheduler.tile_scheduler_metadata is not None
    run_decode(backend, golden, decode)
    assert _calls("dense")[1]["tile_scheduler_metadata"] is decode.scheduler.tile_scheduler_metadata
    _matches(golden, backend, out, lse)


def test_e4m3_schedule_once_per_batch_and_the_descales() -> None:
    backend = CpuFlashMLA()
    golden, decode, (out, lse) = decode_golden(backend, FP8)
    (meta,) = _calls("fp8_metadata")
    assert meta["num_q_tokens_per_head_k"] == golden.case.q_len * golden.case.heads
    (call,) = _calls("fp8")
    assert call["tile_scheduler_metadata"] is decode.scheduler.tile_scheduler_metadata
    assert float(call["descale_q"]) == pytest.approx(golden.q_scale)
    assert float(call["descale_k"]) == pytest.approx(golden.kv_scale)
    assert call["softmax_scale"] == golden.sm_scale
    _matches(golden, backend, out, lse)


def test_flashmla_s_lse_is_converted() -> None:
    lse = torch.tensor([[[1.0, 2.0], [3.0, float("inf")]]])  # [b=1, h=2, s_q=2]
    converted = fm.to_suite_lse(lse)
    assert converted.tolist() == [[1.0, 3.0], [2.0, float("-inf")]]


def test_a_batch_of_unequal_query_lengths_is_refused_naming_the_request() -> None:
    backend = CpuFlashMLA()
    golden = for_backend(load_golden(GoldenStore(), BF16_P64), backend)
    decode = golden.decode_metadata("cpu", with_plan=False)
    decode.query_start_loc_cpu = torch.tensor([0, 2, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="request 1 1 query tokens, expected 2"):
        fm.uniform_query_len(decode)


def test_it_passes_the_numerics_contract_on_what_it_declares(pytester, monkeypatch):
    backend = CpuFlashMLA()
    result = run_numerics(pytester, monkeypatch, backend)
    assert_passes_what_it_declares(result, backend, at_least=10)
    result.stdout.fnmatch_lines(["*not applicable: flashmla-on-fake declares dtype_pairs=*"])


class DropsDescales(CpuFlashMLA):
    name: ClassVar[str] = "flashmla-no-descales"

    def run(self, ops, q, kv_cache, schedule, scales):
        return super().run(ops, q, kv_cache, schedule, fm.DecodeScales(scales.sm_scale))


class CausalOff(CpuFlashMLA):
    name: ClassVar[str] = "flashmla-not-causal"

    def run(self, ops, q, kv_cache, schedule, scales):
        schedule.causal = False
        return super().run(ops, q, kv_cache, schedule, scales)


class PassesPagesThrough(CpuFlashMLA):
    name: ClassVar[str] = "flashmla-any-page"
    page_sizes: ClassVar[tuple[int, ...] | None] = None

    def check_inputs(self, q, kv_cache):
        return q.dtype == fm.E4M3


class SeqlensOffByOne(CpuFlashMLA):
    name: ClassVar[str] = "flashmla-seqlens-minus-one"

    def run(self, ops, q, kv_cache, schedule, scales):
        schedule.cache_seqlens = schedule.cache_seqlens - 1
        return super().run(ops, q, kv_cache, schedule, scales)


class ReusesOneSchedule(CpuFlashMLA):
    name: ClassVar[str] = "flashmla-stale-schedule"
    kept: ClassVar[dict] = {}

    def run(self, ops, q, kv_cache, schedule, scales):
        key = schedule.fp8
        if key in self.kept:
            schedule.tile_scheduler_metadata, schedule.num_splits = self.kept[key]
        out = super().run(ops, q, kv_cache, schedule, scales)
        self.kept.setdefault(key, (schedule.tile_scheduler_metadata, schedule.num_splits))
        return out


class KeepsFlashMLALse(CpuFlashMLA):
    name: ClassVar[str] = "flashmla-lse-unconverted"

    def decode_scaled(self, q, kv_cache, decode, scales):
        out, _ = super().decode_scaled(q, kv_cache, decode, scales)
        _, lse = self.run(self.ops(), q, kv_cache, decode.scheduler, scales)
        return out, lse.reshape(out.shape[0], out.shape[1])  # [b, h, s_q] read as [T, h]


@pytest.mark.parametrize(
    ("broken", "must_fail"),
    [
        (DropsDescales, FP8),
        (CausalOff, BF16_MTP),
        (PassesPagesThrough, BF16_MTP),
        (SeqlensOffByOne, BF16_P64),
        (KeepsFlashMLALse, BF16_P64),
    ],
    ids=["descales-dropped", "causal-off", "page-16-passed", "seqlens-off-by-one", "lse-as-is"],
)
def test_the_suite_catches_a_broken_flashmla_call(broken, must_fail) -> None:
    backend = broken()
    with pytest.raises((AssertionError, RuntimeError)):
        golden, _, (out, lse) = decode_golden(backend, must_fail)
        _matches(golden, backend, out, lse)


def test_the_suite_catches_a_schedule_reused_for_another_batch(pytester, monkeypatch) -> None:
    ReusesOneSchedule.kept.clear()
    result = run_numerics(pytester, monkeypatch, ReusesOneSchedule())
    assert len(failed_cases(result)) >= 2, result.outlines[-5:]


def test_it_passes_the_masking_contract_in_64_token_pages(pytester, monkeypatch) -> None:
    result = run_conformance(pytester, monkeypatch, CpuFlashMLA(), str(MASKING))
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 2 and "failed" not in outcomes, outcomes


def test_the_masking_contract_catches_the_causal_flag_off(pytester, monkeypatch) -> None:
    result = run_conformance(pytester, monkeypatch, CausalOff(), str(MASKING))
    assert result.parseoutcomes().get("failed") == 2
    result.stdout.fnmatch_lines(["*query token 0*"])
