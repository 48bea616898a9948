"""A new built-in backend touches three places: its module, its expectation file and its
declaration in `conformance.targets`. Everything else (registry, sign-off, fingerprint, CI
matrix, nox sessions, pytest plugin) sees it from there."""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from backends import registry
from conformance import targets
from conformance.ci.matrix import build_matrix
from conformance.signoff.fingerprint import behaviour_files
from conformance.signoff.machine import RegistryView, StaticView, known_backends
from conformance.target_types import BackendTarget, EngineTarget
from conformance.targets import BUILTIN_TARGETS

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
NAME = "tiny_gpu"
MODULE = '''
from typing import ClassVar

import torch

from backends.base import Availability, Backend
from backends.common import PlanFreeBuilder


class TinyGpuBackend(Backend):
    """A backend that is never available (it only has to be seen)."""

    name: ClassVar[str] = "tiny_gpu"
    layer_protocol: ClassVar[frozenset[str]] = frozenset()

    def availability(self) -> Availability:
        return Availability(False, "a declaration example")

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def builder_cls(self):
        return PlanFreeBuilder
'''


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Place 1: the module; place 2: the expectation file; place 3: the declaration."""
    (tmp_path / "tiny_gpu_backend.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    expectations = tmp_path / "expectations"
    expectations.mkdir()
    (expectations / f"{NAME}.txt").write_text("# nothing expected to fail\n", encoding="utf-8")
    declaration = BackendTarget(
        name=NAME,
        description="Conformance run of a tiny GPU backend.",
        class_path="tiny_gpu_backend:TinyGpuBackend",
        device=targets.CUDA,
        behaviour_files=("backends/flashinfer_backend.py",),
        environment={"TINY_GPU_MODE": "strict"},
    )
    monkeypatch.setitem(BUILTIN_TARGETS, NAME, declaration)
    registry.get_backend.cache_clear()
    yield expectations
    registry.get_backend.cache_clear()
    sys.modules.pop("tiny_gpu_backend", None)


def test_the_registry_loads_it_with_its_declared_facts(tiny: Path) -> None:
    assert NAME in registry.backend_names()
    backend = registry.get_backend(NAME)
    assert targets.device_of(NAME) is targets.CUDA  # from the declaration
    assert dict(BUILTIN_TARGETS[NAME].environment) == {"TINY_GPU_MODE": "strict"}
    assert backend.device_kind is None and not backend.environment  # the class declares none
    assert backend.check_declaration() == []


def test_the_sign_off_knows_its_name_device_and_files(tiny: Path) -> None:
    assert NAME in known_backends(StaticView(), tiny)
    assert NAME in known_backends(RegistryView(), REPO_ROOT / "missing")
    assert RegistryView().device_kind(NAME) == "cuda"
    files = behaviour_files(NAME, REPO_ROOT)
    assert "backends/flashinfer_backend.py" in files
    assert "backends/triton_backend.py" not in files


def test_the_ci_matrix_runs_it_on_its_device_kind(tiny: Path) -> None:
    listing = [{"session": NAME, "name": NAME, "tags": ["gpu", "cuda"], "call_spec": {}}]
    (job,) = build_matrix(listing, {})["include"]
    assert job["runs_on"] == ["self-hosted", "nvidia"]
    assert job["timeout_minutes"] == targets.DEVICE_KINDS["cuda"].timeout_minutes


def test_nox_lists_a_session_for_it(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nox_registry = pytest.importorskip("nox.registry")
    monkeypatch.setattr(nox_registry, "_REGISTRY", {})  # the noxfile registers anew
    runpy.run_path(str(REPO_ROOT / "noxfile.py"), run_name="noxfile_under_test")
    sessions = nox_registry.get()
    assert NAME in sessions
    assert list(sessions[NAME].tags) == ["gpu", "cuda"]
    assert sessions[NAME].func.__doc__ == "Conformance run of a tiny GPU backend."


def test_the_pytest_plugin_sets_its_environment(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = importlib.import_module("conformance.harness.plugin")
    monkeypatch.delenv("TINY_GPU_MODE", raising=False)

    plugins = SimpleNamespace(is_registered=lambda plugin: True)
    config = SimpleNamespace(stash={}, getoption=lambda name: NAME, pluginmanager=plugins)
    plugin.pytest_configure(config)  # type: ignore[arg-type]
    assert os.environ.get("TINY_GPU_MODE") == "strict"
    monkeypatch.delenv("TINY_GPU_MODE", raising=False)


ENGINE = {
    "name": "someengine",
    "description": "An engine.",
    "device": targets.CUDA,
    "distribution": "someengine",
    "runtime": (),
    "suite": ("pytest",),
    "tests": "tests/engines/someengine",
    "probe_modules": ("someengine",),
    "must_build": ("ONLY",),
}


def test_an_engine_target_needs_no_class_but_its_details_typed() -> None:
    engine = EngineTarget(**ENGINE, version="1.1", min_version="1.0", below_version="2.0")
    assert not hasattr(engine, "class_path") and not engine.default and engine.kind == "engine"
    assert engine.supports("1.5") is None and "outside the releases" in str(engine.supports("2.0"))
    releases = {"version": "1.1", "min_version": "1.0", "below_version": "2.0"}
    without = {key: value for key, value in ENGINE.items() if key != "distribution"}
    with pytest.raises(TypeError, match="distribution"):
        EngineTarget(**without, **releases)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"version 2\.1 is outside"):
        EngineTarget(**ENGINE, version="2.1", min_version="1.0", below_version="2.0")


def test_a_backend_needs_a_class_and_a_device_kind_that_exists() -> None:
    with pytest.raises(TypeError, match="class_path"):
        BackendTarget(name="noclass", description="No class.", device=targets.CPU)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="class_path: expected 'module:Class'"):
        BackendTarget(name="bad", description="A bad path.", class_path="m.C", device=targets.CPU)
    with pytest.raises(ValueError, match="device_kind: expected one of"):
        targets.plugin_target("tpu", type("TpuBackend", (), {"device_kind": "tpu"}), "m:C")
