"""GPU pinning and xdist workers follow the declared device kind, never the backend's name:
``MLA_GPU_COUNT=4`` gives a GPU plug-in (and `flashinfer`) 4 workers, each on its own GPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance import targets
from conformance.ci import sessions
from conformance.harness import reporting
from conformance.harness.run_state import RunState
from conformance.runs.environment import gpu_count

pytestmark = pytest.mark.selftest

PLUGIN = '''
class FastMlaBackend:
    """A third-party GPU backend (only its declaration is read)."""

    name = "fastmla"
    device_kind = "cuda"
'''


@pytest.fixture
def gpu_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An installed plug-in ``fastmla`` declaring ``device_kind = "cuda"``."""
    (tmp_path / "fastmla_plugin.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        targets, "plugin_entry_points", lambda: {"fastmla": "fastmla_plugin:FastMlaBackend"}
    )
    return "fastmla"


def _pin(
    backend: str, worker: str, count: int, environ: dict, monkeypatch: pytest.MonkeyPatch
) -> dict:
    """What the report plugin's worker configuration sets for ``worker`` of ``count``, in a
    worker process whose environment is ``environ``."""
    config = SimpleNamespace(workerinput={"workerid": worker, "workercount": count})
    state = RunState(backend=backend, shard=None, junit_path=None, expectations_file=Path("x"))
    worker_environ = dict(environ)
    monkeypatch.setattr(reporting, "os", SimpleNamespace(environ=worker_environ))
    reporting.pin_worker(config, state)  # type: ignore[arg-type]
    assert {key: worker_environ[key] for key in state.pinned} == state.pinned
    return state.pinned


@pytest.mark.parametrize("backend", ["fastmla", "flashinfer", "cuda"])
def test_four_gpus_give_four_workers_each_on_its_own_gpu(
    backend: str, gpu_plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"MLA_GPU_COUNT": "4"}
    gpus = gpu_count(environ)
    device = targets.device_of(backend)
    assert device is targets.CUDA
    assert sessions.worker_args(device, [], gpus) == ["-n", "4"]
    pinned = [_pin(backend, f"gw{index}", 4, environ, monkeypatch) for index in range(4)]
    assert pinned == [{"CUDA_VISIBLE_DEVICES": str(index)} for index in range(4)]


def test_two_visible_devices_give_each_worker_one_of_them(
    gpu_plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "0,1"}
    pinned = [_pin(gpu_plugin, f"gw{index}", 2, environ, monkeypatch) for index in range(2)]
    assert pinned == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]


@pytest.mark.parametrize("backend", ["cpu", "interpret", "no_such_backend"])
def test_cpu_backends_are_never_pinned(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _pin(backend, "gw1", 4, {"MLA_GPU_COUNT": "4"}, monkeypatch) == {}


def test_a_plug_in_the_nox_process_cannot_see_runs_on_its_session_s_kind() -> None:
    cpu, cuda = targets.BUILTIN_TARGETS["cpu"], targets.BUILTIN_TARGETS["cuda"]
    assert sessions.run_target("unseen_plugin", cuda).device_kind == "cuda"
    assert sessions.run_target("unseen_plugin", cpu).device_kind == "cpu"
    assert sessions.run_target("flashinfer", cpu).device_kind == "cuda"
    assert sessions.run_target("interpret", cpu).environment == {"TRITON_INTERPRET": "1"}
