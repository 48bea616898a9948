"""Sessions of the MLA Conformance Suite (``nox -l`` lists them).

Backend sessions (`cpu`, `interpret`, `cuda`, `rocm`) run the shared conformance set and
write ``reports/junit/<backend>[-shard-<i>-of-<n>].xml``; `signoff` merges them.

Environments: CPU sessions share one virtualenv with the pinned CPU build of torch
(no multi-GB CUDA download). GPU sessions use a virtualenv with the interpreter's own
site packages, so the vendor torch of a CUDA or ROCm machine is used as it is; where the
interpreter has no torch, they fall back to the CPU environment and their tests are
reported skipped with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import nox

nox.needs_version = ">=2025.02.09"
nox.options.default_venv_backend = "none"
nox.options.sessions = ["cpu", "interpret", "cuda", "rocm", "signoff"]

ROOT = Path(__file__).resolve().parent
ENV_DIR = ROOT / ".nox"
JUNIT_DIR = ROOT / "reports" / "junit"

CPU_TORCH = "torch==2.13.0"
TRITON = "triton==3.9.0"
REQUIREMENTS = [
    "numpy>=1.26",
    "pytest>=8.0",
    "pytest-xdist>=3.5",
    "junitparser>=4.0",
    "defusedxml>=0.7",
    "safetensors>=0.4",
]
CPU_REQUIREMENTS = [CPU_TORCH, TRITON, *REQUIREMENTS]


def _python(venv: Path) -> str:
    return str(venv / "bin" / "python")


def _ensure_venv(
    session: nox.Session, name: str, requirements: list[str], *, system_site: bool = False
) -> str:
    """Create (once) and return the python of a virtualenv holding `requirements`.

    With `system_site`, the new environment also sees the site packages of the interpreter
    running nox — also when that interpreter is itself a virtualenv, whose packages
    ``--system-site-packages`` alone would not reach.
    """
    venv = ENV_DIR / name
    stamp = venv / ".requirements-stamp"
    key = [requirements, system_site, sys.prefix if system_site else None]
    wanted = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return _python(venv)
    args = [sys.executable, "-m", "venv", "--clear", str(venv)]
    if system_site:
        args.insert(3, "--system-site-packages")
    session.run(*args, external=True)
    if system_site and sys.prefix != sys.base_prefix:
        _link_site_packages(venv)
    if requirements:
        session.run(_python(venv), "-m", "pip", "install", "-q", *requirements, external=True)
    stamp.write_text(wanted)
    return _python(venv)


def _link_site_packages(venv: Path) -> None:
    """Make `venv` see the site packages of the (virtualenv) interpreter running nox."""
    probe = "import site, sysconfig; print(sysconfig.get_paths()['purelib'])"
    target = subprocess.run(
        [_python(venv), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    Path(target, "_nox_interpreter_site.pth").write_text("\n".join(site.getsitepackages()) + "\n")


def _cpu_python(session: nox.Session) -> str:
    return _ensure_venv(session, "venv-cpu", CPU_REQUIREMENTS)


def _system_has_torch() -> str | None:
    """The interpreter's torch version, or None when it has none."""
    probe = "import torch; print(torch.__version__)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def _gpu_python(session: nox.Session) -> str:
    """A virtualenv over the interpreter's own torch (vendor build), else the CPU one."""
    version = _system_has_torch()
    if version is None:
        session.log(
            f"{sys.executable} has no torch: the GPU backend cannot run here; using the CPU "
            f"environment ({CPU_TORCH}) so that its tests are reported skipped with the reason"
        )
        return _cpu_python(session)
    session.log(f"using the interpreter's torch {version}")
    return _ensure_venv(session, "venv-system", REQUIREMENTS, system_site=True)


def _shard_arg(posargs: list[str]) -> str | None:
    for i, arg in enumerate(posargs):
        if arg == "--shard" and i + 1 < len(posargs):
            return posargs[i + 1]
        if arg.startswith("--shard="):
            return arg.split("=", 1)[1]
    return None


def _junit_path(backend: str, posargs: list[str]) -> Path:
    from conformance.harness.sharding import junit_name, parse_shard

    shard = _shard_arg(posargs)
    return JUNIT_DIR / junit_name(backend, parse_shard(shard) if shard else None)


def _archive_stale_reports(session: nox.Session, backend: str, junit: Path) -> None:
    """Move this backend's reports that the new run supersedes to reports/previous/.

    A new unsharded run supersedes every earlier file of the backend; a shard run
    supersedes the unsharded file, shard files of another shard count and its own file.
    Nothing is deleted.
    """
    from conformance.harness.sharding import parse_junit_name

    _, shard = parse_junit_name(junit.name)
    stale = []
    for path in sorted(JUNIT_DIR.glob(f"{backend}*.xml")):
        try:
            name, other = parse_junit_name(path.name)
        except ValueError:
            continue
        if name != backend:
            continue
        if path == junit or shard is None or other is None or other.count != shard.count:
            stale.append(path)
    if not stale:
        return
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = ROOT / "reports" / "previous" / stamp
    target.mkdir(parents=True, exist_ok=True)
    for path in stale:
        for item in (path, path.with_suffix(".meta.json")):
            if item.exists():
                shutil.move(str(item), target / item.name)
    session.log(f"earlier {backend} reports moved to {target.relative_to(ROOT)}")


def _gpu_count(backend: str) -> int:
    """GPUs to spread a GPU backend over: MLA_GPU_COUNT, else what nvidia-smi lists (cuda)."""
    text = os.environ.get("MLA_GPU_COUNT", "")
    if text:
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"MLA_GPU_COUNT={text!r}: expected a whole number of GPUs (>= 1)")
        return int(text)
    if backend == "cuda" and shutil.which("nvidia-smi"):
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        if listing.returncode == 0:
            return max(1, sum(line.startswith("GPU ") for line in listing.stdout.splitlines()))
    return 1


def _worker_args(backend: str, posargs: list[str]) -> list[str]:
    """xdist workers: one per core on CPU backends, one per GPU on GPU backends."""
    if any(arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in posargs):
        return []
    if backend in ("cpu", "interpret"):
        return ["-n", "auto"]  # with OMP_NUM_THREADS=1 (see _thread_env)
    gpus = _gpu_count(backend)
    return ["-n", str(gpus)] if gpus > 1 else []


def _thread_env(backend: str) -> dict[str, str]:
    """One torch thread per xdist worker on the CPU backends (one worker per core)."""
    return {"OMP_NUM_THREADS": "1"} if backend in ("cpu", "interpret") else {}


def _conformance(
    session: nox.Session, backend: str, python: str, *, allow_empty: bool = True, **env: str
) -> None:
    """Run the shared conformance set for `backend` and write its JUnit file.

    An empty selection (pytest's exit code 5, e.g. an empty shard) passes unless
    `allow_empty` is false.
    """
    sys.path.insert(0, str(ROOT))
    junit = _junit_path(backend, session.posargs)
    junit.parent.mkdir(parents=True, exist_ok=True)
    _archive_stale_reports(session, backend, junit)
    session.run(
        python,
        "-m",
        "pytest",
        "tests/conformance",
        f"--backend={backend}",
        f"--junitxml={junit.relative_to(ROOT)}",  # relative: no machine path in the sidecar
        "-o",
        f"junit_suite_name=mla-{backend}",
        "-p",
        "no:cacheprovider",
        *_worker_args(backend, session.posargs),
        *session.posargs,
        external=True,
        env={"MLA_CONFORMANCE_BACKEND": backend, **_thread_env(backend), **env},
        success_codes=[0, 5] if allow_empty else [0],
    )
    session.log(f"JUnit report: {junit.relative_to(ROOT)}")


@nox.session(tags=["cpu"])
def cpu(session: nox.Session) -> None:
    """Conformance run of the CPU reference backend."""
    _conformance(session, "cpu", _cpu_python(session))


@nox.session(tags=["cpu"])
def interpret(session: nox.Session) -> None:
    """Conformance run of the Triton kernels under TRITON_INTERPRET=1 on the CPU."""
    _conformance(session, "interpret", _cpu_python(session), TRITON_INTERPRET="1")


@nox.session(tags=["gpu", "cuda"])
def cuda(session: nox.Session) -> None:
    """Conformance run of the Triton CUDA backend (skipped with the reason without a GPU)."""
    _conformance(session, "cuda", _gpu_python(session))


@nox.session(tags=["gpu", "rocm"])
def rocm(session: nox.Session) -> None:
    """Conformance run of the AMD AITER backend (skipped with the reason without ROCm)."""
    _conformance(session, "rocm", _gpu_python(session), AITER_MLA_DECODE_PERSISTENT_MAX_BATCH="0")


@nox.session
def tests(session: nox.Session) -> None:
    """The suite's own tests (tests/selftest) and the CPU backends' conformance runs."""
    python = _cpu_python(session)
    session.run(
        python,
        "-m",
        "pytest",
        "tests/selftest",
        "-p",
        "no:cacheprovider",
        *_worker_args("cpu", session.posargs),
        *session.posargs,
        external=True,
        env=_thread_env("cpu"),
    )
    _conformance(session, "cpu", python, allow_empty=False)
    _conformance(session, "interpret", python, allow_empty=False, TRITON_INTERPRET="1")


@nox.session
def goldens(session: nox.Session) -> None:
    """Regenerate tests/goldens serially and print what changed (`-- --check`: verify only)."""
    python = _cpu_python(session)
    session.run(python, "-m", "conformance.goldens", "generate", *session.posargs, external=True)


@nox.session  # no backend tag: the CI matrix (`nox --json -l -t cpu gpu`) leaves it out
def bench(session: nox.Session) -> None:
    """Planner benchmark (CPU), then the Triton decode benchmark (needs CUDA; says so if not)."""
    python = _gpu_python(session)
    session.run(python, "-m", "benchmarks.bench_planner", external=True)
    session.run(python, "-m", "benchmarks.bench_decode", *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff lint and format check."""
    python = _ensure_venv(session, "venv-lint", ["ruff>=0.6"])
    session.run(python, "-m", "ruff", "check", ".", external=True)
    session.run(python, "-m", "ruff", "format", "--check", ".", external=True)


@nox.session(default=True)
def signoff(session: nox.Session) -> None:
    """Sign off the JUnit reports: reports/signoff.{md,json,html}; exit code = verdict.

    Runs last in a plain `nox`, signing off what this machine ran. Release sign-off:
    `nox -s signoff -- --release`. Options: `python -m conformance signoff --help`.
    """
    python = _cpu_python(session)
    session.run(python, "-m", "conformance", "signoff", *session.posargs, external=True)
