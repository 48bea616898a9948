"""The ROCm backend's gating: each missing piece is named, and the stand-in is never a run.

The adapter's probes (``torch_hip_version``, ``probe_device``, ``import_aiter``) are faked
one at a time in `backends.rocm.probe`, where they are looked up; everything else is the
real adapter over the stand-in of fake_aiter.py.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backends.rocm import probe as rocm_probe
from backends.rocm.backend import RocmAiterBackend
from backends.rocm.probe import RocmDevice
from conformance.errors import BackendUnavailable

REPO = Path(__file__).resolve().parents[3]


fake_aiter = sys.modules["mla_selftest_fake_aiter"]  # registered by conftest.py


def reason_of(backend: RocmAiterBackend) -> str:
    """The unavailability reason (the backend must be unavailable)."""
    __tracebackhide__ = True
    availability = backend.availability()
    assert not availability.available, "expected the rocm backend to be unavailable"
    return availability.reason


def fake_device(monkeypatch: pytest.MonkeyPatch, *, arch: str = "gfx942", num_cus: int = 8) -> None:
    """A ROCm torch with one device of `arch` (on the CPU)."""
    device = RocmDevice(torch.device("cpu"), arch, num_cus, f"fake {arch}")
    monkeypatch.setattr(rocm_probe, "torch_hip_version", lambda: "6.4.0-fake")
    monkeypatch.setattr(rocm_probe, "probe_device", lambda: device)


@pytest.mark.skipif(torch.version.hip is not None, reason="this torch has HIP")
def test_this_machine_reports_no_rocm_device_with_the_torch_version() -> None:
    reason = reason_of(RocmAiterBackend())
    assert reason == f"no ROCm device: torch {torch.__version__} has no HIP support"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_hip_torch_without_a_gpu_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rocm_probe, "torch_hip_version", lambda: "6.4.0-fake")
    reason = reason_of(RocmAiterBackend())
    assert reason.startswith("no ROCm device: torch") and "sees no GPU" in reason


def test_unsupported_arch_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device(monkeypatch, arch="gfx90a")
    assert reason_of(RocmAiterBackend()).startswith("unsupported arch gfx90a (fake gfx90a)")


def test_unimportable_aiter_gives_the_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device(monkeypatch)

    def broken() -> None:
        raise ImportError("libamdhip64.so.6: cannot open shared object file")

    monkeypatch.setattr(rocm_probe, "import_aiter", broken)
    assert reason_of(RocmAiterBackend()) == (
        "aiter is not importable: ImportError: libamdhip64.so.6: cannot open shared object file"
    )


@pytest.mark.skipif(importlib.util.find_spec("aiter") is not None, reason="aiter is installed")
def test_missing_aiter_is_named_by_the_real_import(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device(monkeypatch)
    for name in [m for m in sys.modules if m == "aiter" or m.startswith("aiter.")]:
        monkeypatch.delitem(sys.modules, name)
    reason = reason_of(RocmAiterBackend())
    assert reason.startswith("aiter is not importable: ModuleNotFoundError: No module named")


def test_the_standin_is_refused_without_the_selftest_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control of item 4: a stand-in can never make `rocm` available by itself."""
    backend, _ = fake_aiter.install_standin_backend(monkeypatch)
    monkeypatch.setattr(rocm_probe, "ALLOW_STANDIN", False)
    assert "__standin__" in reason_of(backend)


def test_the_standin_with_the_flag_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = fake_aiter.install_standin_backend(monkeypatch, arch="gfx950", num_cus=32)
    assert backend.availability().available
    assert backend.plan_archs() == ("gfx950",)
    assert backend.default_num_cus() == 32
    assert backend.device == torch.device("cpu")
    assert backend.runtime().api.is_standin
    assert backend.plan_cu_counts() == (32,)
    assert backend.decode_archs() == ("gfx950",)


def test_an_unavailable_backend_offers_both_archs_and_refuses_to_build() -> None:
    backend = RocmAiterBackend()
    if backend.availability().available:
        pytest.skip("a ROCm device with aiter is present")
    assert backend.plan_archs() == ("gfx942", "gfx950")
    assert backend.plan_cu_counts() is None
    with pytest.raises(BackendUnavailable, match="backend rocm unavailable"):
        backend.builder_cls()


def test_unset_gate_is_pinned_to_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = fake_aiter.install_standin_backend(monkeypatch)
    monkeypatch.delenv(rocm_probe.PERSISTENT_GATE_ENV)
    assert backend.availability().available
    assert os.environ[rocm_probe.PERSISTENT_GATE_ENV] == "0"


def test_an_open_gate_makes_the_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = fake_aiter.install_standin_backend(monkeypatch)
    monkeypatch.setenv(rocm_probe.PERSISTENT_GATE_ENV, "32")
    reason = reason_of(backend)
    assert reason.startswith("AITER_MLA_DECODE_PERSISTENT_MAX_BATCH=32:")
    assert "non-persistent" in reason


def test_a_gate_aiter_cached_before_the_pin_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, standin = fake_aiter.install_standin_backend(monkeypatch)
    monkeypatch.setenv(rocm_probe.PERSISTENT_GATE_ENV, "32")
    assert standin._persistent_mla_decode_max_batch() == 32  # aiter read it early
    monkeypatch.setenv(rocm_probe.PERSISTENT_GATE_ENV, "0")
    assert "read AITER_MLA_DECODE_PERSISTENT_MAX_BATCH=32 before" in reason_of(backend)


def test_cu_num_disagreeing_with_the_device_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = fake_aiter.install_standin_backend(monkeypatch, num_cus=304, cu_num=80)
    reason = reason_of(backend)
    assert "get_cu_num() says 80 CUs" in reason and "the device has 304" in reason


def test_arch_disagreeing_with_aiter_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, standin = fake_aiter.install_standin_backend(monkeypatch, arch="gfx942")
    standin.arch = "gfx950"
    assert reason_of(backend).startswith("aiter's get_gfx() says gfx950 but the device is gfx942")


def test_wrong_fp8_flavour_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = fake_aiter.install_standin_backend(
        monkeypatch, arch="gfx942", fp8=torch.float8_e4m3fn
    )
    assert reason_of(backend).startswith("aiter.dtypes.fp8 is torch.float8_e4m3fn on gfx942")


def _metadata_without_dtypes(
    seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
    num_heads_k, is_causal, work_metadata_ptrs, work_info_set, work_indptr, reduce_indptr,
    reduce_final_map, reduce_partial_map, page_size=1, kv_granularity=16, max_seqlen_qo=-1,
    uni_seqlen_qo=-1, fast_mode=True, max_split_per_batch=-1, intra_batch_mode=False,
):  # fmt: skip
    """An old get_mla_metadata_v1: no dtype arguments at all."""


def _metadata_with_the_info_order(
    seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
    num_heads_k, is_causal, work_metadata_ptrs, work_indptr, work_info_set, reduce_indptr,
    reduce_final_map, reduce_partial_map, page_size=1, kv_granularity=16, max_seqlen_qo=-1,
    uni_seqlen_qo=-1, fast_mode=True, max_split_per_batch=-1, intra_batch_mode=False,
    dtype_q=None, dtype_kv=None,
):  # fmt: skip
    """A hypothetical get_mla_metadata_v1 taking work_indptr before work_info_set."""


@pytest.mark.parametrize(
    ("replacement", "expected"),
    [
        (_metadata_without_dtypes, "takes no dtype arguments"),
        (_metadata_with_the_info_order, "takes ('seqlens_qo_indptr'"),
    ],
)
def test_api_drift_is_refused(monkeypatch: pytest.MonkeyPatch, replacement, expected) -> None:
    backend, standin = fake_aiter.install_standin_backend(monkeypatch)
    monkeypatch.setattr(standin.modules["aiter"], "get_mla_metadata_v1", replacement)
    assert expected in reason_of(backend)


def test_legacy_dtype_keywords_are_used_when_that_is_all_there_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend, standin = fake_aiter.install_standin_backend(monkeypatch)

    def legacy(
        seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
        num_heads_k, is_causal, work_metadata_ptrs, work_info_set, work_indptr, reduce_indptr,
        reduce_final_map, reduce_partial_map, page_size=1, kv_granularity=16,
        max_seqlen_qo=-1, uni_seqlen_qo=-1, fast_mode=True, max_split_per_batch=-1,
        intra_batch_mode=False, dtype_q=None, dtype_kv=None,
    ):  # fmt: skip
        """The get_mla_metadata_v1 of vLLM #46997's time: legacy dtype keywords only."""

    monkeypatch.setattr(standin.modules["aiter"], "get_mla_metadata_v1", legacy)
    assert backend.runtime().api.dtype_keywords == ("dtype_q", "dtype_kv")


def test_importing_the_adapter_does_not_import_aiter() -> None:
    probe = (
        "import sys, backends.registry, backends.rocm; "
        "backends.registry.get_backend('rocm'); "
        "sys.exit(1 if any(m == 'aiter' or m.startswith('aiter.') for m in sys.modules) else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
