"""A new kind of device is one entry of `conformance.targets.DEVICE_KINDS`, and every consumer of
device facts sees it through the one lookup (`device_of`, or the table for a recorded kind):
GPU pinning, xdist workers, the CI matrix and pipeline, nox's session tags, the provenance a
run records, and what the sign-off checks and warns about. The control: without the entry,
none of them treats the kind as a GPU."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import ClassVar

import pytest

from backends.cpu import CpuReferenceBackend
from conformance import targets
from conformance.ci import buildkite, sessions
from conformance.ci.matrix import backend_tags, build_matrix
from conformance.harness import gpu_pinning
from conformance.runs import provenance
from conformance.runs.names import sidecar_path
from conformance.signoff.engine import run_signoff
from conformance.signoff.integrity import device_kind_issue
from conformance.signoff.machine import RegistryView, StaticView
from conformance.target_types import BackendTarget, DeviceKind

from synthetic_reports import edit_sidecar, node_ids, offline_options, write_backend

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
XPU = DeviceKind("xpu", "ZE_AFFINITY_MASK", ("self-hosted", "intel"), "intel", 120, ("gpu", "xpu"))
BUILT_IN, PLUG_IN = "tiny_xpu", "fast_xpu"
IDS = node_ids("metadata", 4)


class FastXpuBackend(CpuReferenceBackend):
    """A plug-in on the new kind of device (only its declaration is read)."""

    name: ClassVar[str] = PLUG_IN
    device_kind: ClassVar[str | None] = "xpu"


@pytest.fixture
def declared_plug_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed plug-in declaring ``device_kind = "xpu"``."""
    monkeypatch.setattr(targets, "plugin_entry_points", lambda: {PLUG_IN: "m:FastXpuBackend"})
    monkeypatch.setattr(targets, "load_class", lambda _: FastXpuBackend)


@pytest.fixture
def xpu(monkeypatch: pytest.MonkeyPatch, declared_plug_in: None) -> DeviceKind:
    """The kind registered, and a built-in backend declared on it."""
    monkeypatch.setitem(targets.DEVICE_KINDS, XPU.name, XPU)
    declaration = BackendTarget(
        name=BUILT_IN,
        description="Conformance run of a tiny XPU backend.",
        class_path="tiny_xpu_backend:TinyXpuBackend",
        device=XPU,
    )
    monkeypatch.setitem(targets.BUILTIN_TARGETS, BUILT_IN, declaration)
    return XPU


def test_the_lookup_finds_it_for_a_built_in_and_a_plug_in(xpu: DeviceKind) -> None:
    assert targets.device_of(BUILT_IN) is xpu and targets.device_of(PLUG_IN) is xpu
    assert FastXpuBackend().check_declaration() == []


def test_workers_are_one_per_gpu_each_pinned_by_its_variable(xpu: DeviceKind) -> None:
    run = sessions.run_target(BUILT_IN, targets.BUILTIN_TARGETS["cpu"])
    assert sessions.worker_args(run.device, [], 2) == ["-n", "2"]
    for backend in (BUILT_IN, PLUG_IN):
        pinned = gpu_pinning.pinned_for_backend(
            backend, {"ZE_AFFINITY_MASK": "4,5"}, worker_id="gw1", worker_count=2
        )
        assert pinned == {"ZE_AFFINITY_MASK": "5"}


def test_ci_runs_it_on_its_runners_and_queue(xpu: DeviceKind) -> None:
    assert "xpu" in backend_tags()
    listing = [
        {"session": BUILT_IN, "name": BUILT_IN, "tags": ["gpu", "xpu"], "call_spec": {}},
        {"session": "outside", "name": "outside", "tags": ["xpu"], "call_spec": {}},
    ]
    jobs = build_matrix(listing, {})["include"]
    assert [(job["runs_on"], job["timeout_minutes"]) for job in jobs] == [
        (["self-hosted", "intel"], 120)
    ] * 2
    conformance = [step for step in buildkite.steps(jobs) if step.get("key") != "signoff"]
    assert [step["agents"]["queue"] for step in conformance if "agents" in step] == ["intel"] * 2


def test_nox_tags_its_session(xpu: DeviceKind, monkeypatch: pytest.MonkeyPatch) -> None:
    nox_registry = pytest.importorskip("nox.registry")
    monkeypatch.setattr(nox_registry, "_REGISTRY", {})  # the noxfile registers anew
    runpy.run_path(str(REPO_ROOT / "noxfile.py"), run_name="noxfile_under_test")
    assert list(nox_registry.get()[BUILT_IN].tags) == ["gpu", "xpu"]


def test_a_run_records_the_gpu(xpu: DeviceKind, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "gpu_name", lambda: "XPU-1")
    assert provenance.device_name(BUILT_IN) == "XPU-1"


def test_the_sign_off_expects_it_and_warns_about_a_run_that_names_no_gpu(
    xpu: DeviceKind, tmp_path: Path
) -> None:
    assert RegistryView().device_kind(PLUG_IN) == StaticView().device_kind(BUILT_IN) == "xpu"
    assert device_kind_issue("x.xml", {"device": "a CPU"}, backend=BUILT_IN, expected="xpu")
    (junit,) = write_backend(tmp_path / "junit", BUILT_IN, IDS)
    edit_sidecar(sidecar_path(junit), gpus=[])
    result = run_signoff(offline_options(tmp_path, write=False))
    warnings = result.backends[BUILT_IN].warnings
    assert any("a xpu run whose sidecar names no GPU" in line for line in warnings), warnings


def test_without_its_entry_no_consumer_treats_it_as_a_gpu(declared_plug_in: None) -> None:
    assert "xpu" not in targets.DEVICE_KINDS and "xpu" not in backend_tags()
    assert targets.device_of(PLUG_IN) is None  # its declaration names no known kind
    assert FastXpuBackend().check_declaration() == [
        f"device_kind: expected one of {sorted(targets.DEVICE_KINDS)}"
    ]
    assert gpu_pinning.pinned_devices("xpu", {}, worker_id="gw1", worker_count=2) == {}
    assert device_kind_issue("x.xml", {"device": "a CPU"}, backend=PLUG_IN, expected="xpu") is None
