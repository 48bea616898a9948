"""The noxfile as a user types it: bad arguments fail in one line and move no report.

Runs ``nox --no-venv`` on a copy of the noxfile and the harness (``--no-venv`` sessions install
nothing and use this interpreter), so no environment is made.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
EARLIER = ("cpu.xml", "cpu.meta.json", "cuda.xml")

pytest.importorskip("nox")  # the tests session installs it (requirements/tests.txt)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    shutil.copy(REPO_ROOT / "noxfile.py", root / "noxfile.py")
    for folder in ("conformance", "requirements"):
        shutil.copytree(REPO_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__py*"))
    junit = root / "reports" / "junit"
    junit.mkdir(parents=True)
    for name in EARLIER:
        (junit / name).write_text(name)
    return root


def nox(tree: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in __import__("os").environ.items()}
    environ.pop("MLA_GPU_COUNT", None)
    environ.update(env)
    command = [sys.executable, "-m", "nox", "--no-venv", "-f", str(tree / "noxfile.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=120)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["-s", "cpu", "--", "--shard", "4/3"], {}, "the index I must be between 1 and 3"),
        (["-s", "cpu", "--", "--shard", "abc"], {}, "is not of the form I/N"),
        (["-s", "cpu", "--", "--shard", "0/0"], {}, "the count N must be at least 1"),
        (["-s", "cuda"], {"MLA_GPU_COUNT": "abc"}, "MLA_GPU_COUNT='abc'"),
        (["-s", "cpu", "--", "--backend", "no/such"], {}, "--backend: backend name 'no/such'"),
    ],
)
def test_bad_invocations_fail_in_one_line_before_anything_moves(
    tree: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    result = nox(tree, *args, **env)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output
    (failure,) = [line for line in output.splitlines() if "aborted:" in line or "failed:" in line]
    assert message in failure, output
    assert sorted(path.name for path in (tree / "reports" / "junit").iterdir()) == sorted(EARLIER)
    assert not (tree / "reports" / "previous").exists()


def test_sessions_list_with_their_backend_tags(tree: Path) -> None:
    result = nox(tree, "-l", "--json", "-t", "cpu", "gpu")
    assert result.returncode == 0, result.stderr
    assert '"session": "cuda"' in result.stdout


@pytest.mark.parametrize(("args", "code"), [(["--bogus"], 2), (["--release"], 3)])
def test_the_sign_off_verdict_is_nox_s_exit_code(tree: Path, args: list[str], code: int) -> None:
    """No reports: --release is INCOMPLETE (3); a bad option is a usage error (2)."""
    result = nox(tree, "-s", "signoff", "--", *args)
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Session signoff aborted: sign-off verdict" in output
    assert f"nox exits with {code}" in output


class _Session:
    """What the bench session calls on a nox session, recorded."""

    def __init__(self) -> None:
        self.posargs: list[str] = []
        self.logged: list[str] = []
        self.ran: list[tuple[str, ...]] = []

    def log(self, message: str) -> None:
        self.logged.append(message)

    def run(self, *args: str) -> None:
        self.ran.append(args)


def test_bench_without_torch_logs_what_it_installs_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench session has benchmarks, not tests: its log line says so."""
    spec = importlib.util.spec_from_file_location("noxfile_under_test", REPO_ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    installed: list[str] = []
    monkeypatch.setattr(module, "_reach_interpreter_site", lambda session: None)
    monkeypatch.setattr(module, "_has_torch", lambda session: False)
    monkeypatch.setattr(
        module, "_install", lambda session, requirements: installed.append(requirements)
    )
    monkeypatch.setattr(module, "_python", lambda session: "python")
    session = _Session()
    module.bench(session)
    assert installed == [module.CPU]
    (line,) = session.logged
    said = line.partition(" has no torch")[2]  # the interpreter's own path may hold "tests"
    assert "planner benchmark" in said and "tests" not in said, line
    assert [run[2] for run in session.ran] == [
        "benchmarks.bench_planner",
        "benchmarks.bench_decode",
    ]
    conformance = _Session()
    module._gpu_install(conformance)
    assert conformance.logged[0].endswith(
        "so the tests are collected and reported skipped with the reason"
    )


def test_the_vllm_session_refuses_a_tree_that_is_not_vllm_with_exit_2(
    tree: Path, tmp_path: Path
) -> None:
    """``nox -s vllm -- --tree DIR`` at a folder that is no vLLM tree: one line, exit 2,
    nothing installed or moved."""
    result = nox(tree, "-s", "vllm", "--", "--tree", str(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output
    (failure,) = [line for line in output.splitlines() if "aborted:" in line]
    assert "not a vllm tree" in failure, output
    assert sorted(path.name for path in (tree / "reports" / "junit").iterdir()) == sorted(EARLIER)
