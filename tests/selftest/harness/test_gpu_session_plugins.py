"""A GPU session loads the pytest plugins the suite needs, not those of the interpreter's site.

The GPU sessions see the interpreter's site packages (for a vendor torch); a pytest plugin
installed there must not be loaded into the conformance run. The noxfile's own command line
is captured from a fake session and run for real with a plugin installed beside the run
(found through ``PYTHONPATH`` like a site package): without the isolation it is loaded (the
control), with it it is not, and xdist's workers still run.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conformance.harness.pytest_plugins import AUTOLOAD_VARIABLE, isolated_plugins
from conformance.targets import BUILTIN_TARGETS

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
PLUGIN = """
import os
from pathlib import Path

def pytest_configure(config):
    Path(os.environ["STRAY_PLUGIN_MARKER"]).write_text("loaded")
"""


@functools.cache
def _noxfile() -> ModuleType:
    pytest.importorskip("nox")
    spec = importlib.util.spec_from_file_location("noxfile_plugins", REPO_ROOT / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Session:
    venv_backend = "virtualenv"
    bin = str(Path(sys.executable).parent)

    def __init__(self) -> None:
        self.posargs: list[str] = []
        self.env: dict[str, str] = {}
        self.ran: list[tuple[tuple[str, ...], dict[str, str]]] = []

    def run(self, *args: str, env: dict[str, str]) -> None:
        self.ran.append((args, env))

    def log(self, message: str) -> None:
        pass


def _gpu_command(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, str]]:
    """What the cuda session runs on a machine with two GPUs."""
    module = _noxfile()
    monkeypatch.setattr(module, "_python", lambda session: sys.executable)
    monkeypatch.setattr(module, "_gpus", lambda kind: 2)
    monkeypatch.setattr(module.sessions, "run_outcome", lambda junit, since: None)
    session = _Session()
    module._conformance(session, BUILTIN_TARGETS["cuda"], "cuda", "cuda.xml")
    ((args, env),) = session.ran
    return list(args), env


def test_the_gpu_session_disables_autoload_and_names_xdist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args, env = _gpu_command(monkeypatch)
    assert env[AUTOLOAD_VARIABLE] == "1"
    named = args.index("xdist.plugin")
    assert args[named - 1] == "-p"
    assert args[args.index("-n") + 1] == "2"


def test_without_xdist_no_plugin_is_named() -> None:
    assert isolated_plugins(set()) == ({AUTOLOAD_VARIABLE: "1"}, [])


def _stray_site(tmp_path: Path) -> Path:
    """A site folder holding a pytest plugin registered through its entry point."""
    site = tmp_path / "site"
    (site / "stray_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "stray_plugin.py").write_text(PLUGIN)
    info = site / "stray_plugin-1.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stray-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nstray = stray_plugin\n")
    return site


@pytest.mark.parametrize("isolated", [False, True])
def test_a_plugin_of_the_interpreters_site_is_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: bool
) -> None:
    args, env = _gpu_command(monkeypatch)
    if not isolated:  # the control: the same run as it was before the isolation
        env = {key: value for key, value in env.items() if key != AUTOLOAD_VARIABLE}
        named = args.index("xdist.plugin")
        args = args[: named - 1] + args[named + 1 :]
    small = "tests/conformance/test_metadata_holes.py"
    args = [small if arg == "tests/conformance" else arg for arg in args]
    args = [f"--junitxml={tmp_path}/cuda.xml" if a.startswith("--junitxml") else a for a in args]
    marker = tmp_path / "marker"
    environ = {
        **os.environ,
        **env,
        "PYTHONPATH": os.pathsep.join([str(_stray_site(tmp_path)), str(REPO_ROOT)]),
        "STRAY_PLUGIN_MARKER": str(marker),
    }
    result = subprocess.run(
        args, cwd=REPO_ROOT, env=environ, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert marker.exists() == (not isolated), result.stdout[-1000:]
    assert "created: 2/2 workers" in result.stdout, result.stdout[-1000:]
