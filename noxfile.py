"""Sessions of the MLA Conformance Suite (``nox -l`` lists them).

Backend sessions, one per built-in backend of `conformance.targets` (`cpu`, `interpret`,
`cuda`, `rocm`, `flashinfer`, `flashmla`), run the shared conformance set and write
``reports/junit/<backend>[-shard-<i>-of-<n>].xml``; `signoff` merges them. A plain ``nox`` runs
the default ones, then `signoff`. Tags, requirement set, workers and environment follow each
backend's declaration: its device kind and its environment.

Environments are nox's own: one per session under ``.nox/``, made with uv where it is
installed (else virtualenv) and reused on later runs. Each session installs one requirement
set of ``requirements/``. The GPU sessions see the interpreter's site packages
(``--system-site-packages``, and a ``.pth`` file where nox runs in a virtualenv), so a GPU
machine's vendor torch, triton and aiter are used as installed, while pytest loads only the
plugins a run needs (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``, `conformance.harness.pytest_plugins`),
never those installed there; where that interpreter has no torch, the CPU set is installed so
the tests are collected and reported skipped. A backend that cannot run here still writes its
JUnit file (every test skipped, with the reason) and then is a skipped session in nox's
summary.
"""

from __future__ import annotations

import atexit
import os
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from conformance.ci import installer, sessions  # noqa: E402
from conformance.engines.target import VLLM, engine_target  # noqa: E402
from conformance.harness.plugins_env import install_plugins  # noqa: E402
from conformance.harness.pytest_plugins import isolated_plugins, needed_packages  # noqa: E402
from conformance.runs.environment import BACKEND_VARIABLE, gpu_count  # noqa: E402
from conformance.runs.names import JUNIT_DIR, junit_name  # noqa: E402
from conformance.runs.shards import DURATIONS_FILE  # noqa: E402
from conformance.target_types import BackendTarget  # noqa: E402
from conformance.targets import BUILTIN_TARGETS, DEVICE_KINDS, default_names  # noqa: E402

nox.needs_version = ">=2025.02.09"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
nox.options.sessions = [*default_names(), "signoff"]
SGLANG = engine_target("sglang")
VLLM_RELEASES = tuple(VLLM.releases)  # the release matrix (`nox -s vllm_release`)

CPU, GPU, TESTS, LINT = (f"requirements/{name}.txt" for name in ("cpu", "gpu", "tests", "lint"))
GPU_SESSION = {"venv_params": ["--system-site-packages"]}


def _has_venv(session: nox.Session) -> bool:
    return session.venv_backend not in ("none", None)


def _install(session: nox.Session, requirements: str) -> None:
    """Install a requirement set, with progress; uv gets pip's configured wheel sources.

    Under ``nox --no-venv`` nothing is installed: the interpreter's packages are used as they
    are (an offline GPU machine, say).
    """
    if not _has_venv(session):
        session.log(f"no virtualenv (--no-venv): {requirements} is not installed")
        return
    env = {}
    if session.venv_backend == "uv":
        env = installer.uv_environment(installer.pip_settings(), os.environ)
    session.install("-r", requirements, env=env, silent=False)
    # Third-party backends named in MLA_CONFORMANCE_PLUGINS (docs/plugins.md).
    install_plugins(lambda *plugins: session.install(*plugins, env=env, silent=False))


def _python(session: nox.Session) -> str:
    return str(Path(session.bin) / "python") if _has_venv(session) else sys.executable


def _has_torch(session: nox.Session) -> bool:
    probe = [_python(session), "-c", "import torch"]
    return subprocess.run(probe, capture_output=True, env=_env(session)).returncode == 0


def _env(session: nox.Session, **extra: str) -> dict[str, str]:
    return {**os.environ, **{k: v for k, v in session.env.items() if v is not None}, **extra}


def _importable(session: nox.Session, packages: list[str]) -> set[str]:
    """Which of `packages` the session's interpreter can import."""
    code = "import importlib.util as u, sys; print(*[p for p in sys.argv[1:] if u.find_spec(p)])"
    probe = [_python(session), "-c", code, *packages]
    found = subprocess.run(probe, capture_output=True, text=True, env=_env(session))
    return set(found.stdout.split()) if found.returncode == 0 else set()


def _plugin_isolation(session: nox.Session, gpu: bool) -> tuple[dict[str, str], list[str]]:
    """A GPU run sees the interpreter's site packages: it loads only the pytest plugins it
    needs (`conformance.harness.pytest_plugins`), never those installed there."""
    if not gpu:
        return {}, []
    return isolated_plugins(_importable(session, needed_packages()))


def _reach_interpreter_site(session: nox.Session) -> None:
    """Where nox runs in a virtualenv, let the session see that virtualenv's packages too.

    ``--system-site-packages`` reaches the base interpreter's packages only; a vendor torch
    installed in the virtualenv running nox is reached through a ``.pth`` file.
    """
    if sys.prefix == sys.base_prefix or not _has_venv(session):
        return
    probe = [_python(session), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    purelib = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    paths = "\n".join(site.getsitepackages()) + "\n"
    Path(purelib, "_nox_interpreter_site.pth").write_text(paths, encoding="utf-8")


TESTS_WITHOUT_TORCH = "so the tests are collected and reported skipped with the reason"


def _gpu_install(session: nox.Session, without_torch: str = TESTS_WITHOUT_TORCH) -> None:
    """The base set over the interpreter's torch; the CPU set where it has none (the log
    line says what for: `without_torch`)."""
    _reach_interpreter_site(session)
    if _has_torch(session):
        _install(session, GPU)
        return
    session.log(
        f"{sys.executable} has no torch (a GPU machine brings its vendor build): installing "
        f"{CPU} {without_torch}"
    )
    _install(session, CPU)


def _checked(session: nox.Session, backend: str) -> tuple[str, str]:
    """Validate the session's arguments before anything is installed or moved."""
    try:
        chosen, shard = sessions.check_arguments(backend, session.posargs, os.environ)
    except sessions.SessionArgumentError as error:
        session.error(str(error))
    return chosen, junit_name(chosen, shard)


def _gpus(device_kind: str) -> int:
    """MLA_GPU_COUNT, else what nvidia-smi lists (cuda), else 1."""
    count = gpu_count(os.environ)
    if count is not None:
        return count
    if device_kind == "cuda":
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        except OSError:
            return 1
        if listing.returncode == 0:
            return max(1, sum(line.startswith("GPU ") for line in listing.stdout.splitlines()))
    return 1


def _conformance(session: nox.Session, target: BackendTarget, backend: str, junit: str) -> None:
    """Run the shared conformance set for `backend` (the session's `target`, or the backend
    its ``--backend`` names); skip the session if it cannot run here.

    pytest's exit code 5 (nothing selected) fails the session like any other failure.
    """
    path = JUNIT_DIR / junit
    run = sessions.run_target(backend, target)
    threads = {} if run.device.is_gpu else {"OMP_NUM_THREADS": "1"}
    paths = [] if sessions.has_test_paths(session.posargs, ROOT) else ["tests/conformance"]
    isolation, plugins = _plugin_isolation(session, run.device.is_gpu)
    started = time.time() - 1
    session.run(
        _python(session), "-m", "pytest", *paths,
        f"--backend={backend}",
        f"--junitxml={path.as_posix()}",  # relative: no machine path in the sidecar
        "-o", f"junit_suite_name=mla-{backend}",
        "-p", "no:cacheprovider", *plugins,
        *sessions.worker_args(run.device, session.posargs, _gpus(run.device_kind)),
        *session.posargs,
        env={BACKEND_VARIABLE: backend, **threads, **run.environment, **isolation},
    )  # fmt: skip
    outcome = sessions.run_outcome(ROOT / path, started)
    selection = str((outcome or {}).get("selection", "full"))
    written = path.parent / "partial" / junit if selection == "partial" else path
    session.log(f"JUnit report ({selection} selection): {written.as_posix()}")
    reason = sessions.skip_reason(outcome, backend)
    if reason is not None:
        session.skip(reason)


def _backend_session(target: BackendTarget) -> None:
    """Register the nox session of one declared backend."""
    gpu = target.device.is_gpu

    def run(session: nox.Session) -> None:
        backend, junit = _checked(session, target.name)
        if gpu:
            _gpu_install(session)
        else:
            _install(session, CPU)
        _conformance(session, target, backend, junit)

    run.__doc__ = target.description
    options = GPU_SESSION if gpu else {}
    nox.session(run, name=target.name, tags=list(target.device.tags), **options)


for _target in BUILTIN_TARGETS.values():
    if isinstance(_target, BackendTarget):
        _backend_session(_target)


@nox.session
def tests(session: nox.Session) -> None:
    """The suite's own tests (tests/selftest) and the CPU backends' conformance runs."""
    cpu_targets = [
        target
        for target in BUILTIN_TARGETS.values()
        if isinstance(target, BackendTarget) and target.default and not target.device.is_gpu
    ]
    for target in cpu_targets:
        _checked(session, target.name)
    _install(session, TESTS)
    session.run(
        _python(session), "-m", "pytest", "tests/selftest", "-p", "no:cacheprovider",
        *sessions.worker_args(DEVICE_KINDS["cpu"], session.posargs, 1), *session.posargs,
        env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    for target in cpu_targets:
        _conformance(session, target, target.name, junit_name(target.name, None))


@nox.session
def vllm(session: nox.Session) -> None:
    """vLLM's own record and MLA builders under the families (docs/engines.md).

    ``-- --vllm-version X``, ``-- --vllm-from-interpreter``, ``-- --tree PATH`` (audit a vLLM
    tree with the facts just measured); other arguments go to pytest.
    """
    from conformance.ci.engine_session import run_session

    run_session(session, VLLM)


@nox.session(tags=["engine-release"])
@nox.parametrize("release", list(VLLM_RELEASES))
def vllm_release(session: nox.Session, release: str) -> None:
    """One release of vLLM's release matrix: its facts into reports/engines/ (SHA256SUMS).

    ``nox -s vllm_release`` runs every release of the matrix, each in its own environment
    with its own pins (`EngineTarget.releases`); other arguments go as to ``nox -s vllm``.
    """
    from conformance.ci.engine_session import run_session

    run_session(session, VLLM, release=release)


@nox.session
def vllm_gpu(session: nox.Session) -> None:
    """vLLM's own MLA decode on a CUDA GPU (TRITON_MLA, FLASHMLA) under the numerics and
    masking families; a skipped session without an NVIDIA GPU (docs/engines.md).

    Installs the vLLM release with its whole GPU stack (``-- --vllm-version X``), or uses the
    interpreter's (``-- --vllm-from-interpreter``); other arguments go to pytest.
    """
    from conformance.ci.engine_session import run_session

    if shutil.which("nvidia-smi") is None:
        session.skip("vllm_gpu: no NVIDIA GPU here (nvidia-smi not found)")
    run_session(session, engine_target("vllm_gpu"))


@nox.session(python=SGLANG.python)
def sglang(session: nox.Session) -> None:
    """SGLang's own ForwardBatch, MLA backends and RadixAttention under the families.

    ``-- --sglang-version X``, ``-- --sglang-from-interpreter``; other arguments go to pytest.
    """
    from conformance.ci.engine_session import run_session
    from conformance.engines.sglang.platform import unsupported_platform

    reason = unsupported_platform()
    if reason:
        session.error(reason)
    run_session(session, SGLANG)


@nox.session
def durations(session: nox.Session) -> None:
    """Refresh the committed .test_durations that balance the shards (pytest-split)."""
    _install(session, CPU)
    session.run(
        _python(session), "-m", "pytest", "tests/conformance", "--backend=cpu",
        "-p", "no:cacheprovider", "--store-durations", f"--durations-path={DURATIONS_FILE}",
        *session.posargs,
        env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip


@nox.session
def goldens(session: nox.Session) -> None:
    """Regenerate tests/goldens serially and print what changed (`-- --check`: verify only)."""
    _install(session, CPU)
    session.run(_python(session), "-m", "conformance.goldens", "generate", *session.posargs)


BENCH_WITHOUT_TORCH = "so the planner benchmark runs (the decode benchmark says it needs CUDA)"


@nox.session(**GPU_SESSION)  # no backend tag: the CI matrix (`nox --json -l -t cpu gpu`) skips it
def bench(session: nox.Session) -> None:
    """Planner benchmark (CPU), then the Triton decode benchmark (needs CUDA; says so if not)."""
    _gpu_install(session, BENCH_WITHOUT_TORCH)
    session.run(_python(session), "-m", "benchmarks.bench_planner")
    session.run(_python(session), "-m", "benchmarks.bench_decode", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff lint and format check."""
    _install(session, LINT)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


def _exit_with(code: int) -> None:
    """Make nox's process end with `code` once nox has printed its summary."""

    def _exit() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    atexit.register(_exit)


@nox.session(default=True)
def signoff(session: nox.Session) -> None:
    """Sign off the JUnit reports: reports/signoff.{md,json,html}; nox exits with the verdict.

    Runs last in a plain `nox`, signing off what this machine ran. Release sign-off:
    `nox -s signoff -- --release`. Options: `python -m conformance signoff --help`.
    """
    _install(session, CPU)
    command = [_python(session), "-m", "conformance", "signoff", *session.posargs]
    session.log(" ".join(["python", *command[1:]]))
    code = subprocess.run(command, env=_env(session)).returncode
    if code:
        _exit_with(code)
        verdict = sessions.VERDICT_NAMES.get(code, "unknown")
        session.error(f"sign-off verdict {verdict}: nox exits with {code}")
