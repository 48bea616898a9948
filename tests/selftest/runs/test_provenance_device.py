"""The device a run records follows the backend's declared device kind, not its name."""

from __future__ import annotations

from conformance import targets
from conformance.runs import provenance


def test_a_gpu_backend_of_any_name_records_the_gpu(monkeypatch) -> None:
    monkeypatch.setattr(provenance, "gpu_name", lambda: "GPU-X")
    monkeypatch.setattr(provenance, "cpu_name", lambda: "CPU-Y")
    assert targets.device_of("flashinfer") is targets.CUDA
    assert provenance.device_name("flashinfer") == "GPU-X"
    assert provenance.device_name("cuda") == "GPU-X"
    assert provenance.device_name("cpu") == "CPU-Y"
    assert provenance.device_name("no-such-backend") == "CPU-Y"
