"""What the noxfile decides before a session installs or runs anything.

Pure functions (no nox, no torch), so that the selftests check them and a bad argument or
variable fails the session with one line before any environment or report is touched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from conformance.runs.environment import gpu_count
from conformance.runs.names import Shard, junit_name, parse_shard, partial_junit_path, sidecar_path
from conformance.target_types import DeviceKind, Target
from conformance.targets import declared

# pytest options of the suite's sessions that take a separate value (``-k EXPR``).
VALUE_OPTIONS = frozenset(
    {"-k", "-m", "-n", "-p", "-o", "-c", "--deselect", "--ignore", "--ignore-glob", "--backend",
     "--shard", "--shard-durations", "--expectations-dir", "--junitxml", "--numprocesses",
     "--maxfail", "--rootdir", "--basetemp", "--dist", "--durations", "--tb"}
)  # fmt: skip
VERDICT_NAMES: dict[int, str] = {0: "PASS", 1: "FAIL", 2: "usage or I/O error", 3: "INCOMPLETE"}


class SessionArgumentError(ValueError):
    """A session argument or variable that cannot work; the message is one line."""


def option_value(posargs: Sequence[str], option: str) -> str | None:
    """The last value of ``option`` in `posargs` (``--shard 2/4`` or ``--shard=2/4``)."""
    found = None
    for index, arg in enumerate(posargs):
        if arg == option:
            if index + 1 >= len(posargs):
                raise SessionArgumentError(f"{option}: expected a value after it")
            found = posargs[index + 1]
        elif arg.startswith(option + "="):
            found = arg.split("=", 1)[1]
    return found


def check_arguments(
    backend: str, posargs: Sequence[str], environ: Mapping[str, str]
) -> tuple[str, Shard | None]:
    """The backend and shard a session will run; `SessionArgumentError` for bad input."""
    chosen = option_value(posargs, "--backend") or backend
    try:
        junit_name(chosen, None)
    except ValueError as error:
        raise SessionArgumentError(f"--backend: {error}") from None
    text = option_value(posargs, "--shard")
    try:
        shard = parse_shard(text) if text is not None else None
    except ValueError as error:
        raise SessionArgumentError(f"--shard: {error}") from None
    try:
        gpu_count(environ)
    except ValueError as error:
        raise SessionArgumentError(str(error)) from None
    return chosen, shard


def has_test_paths(posargs: Sequence[str], root: Path) -> bool:
    """Whether `posargs` name test paths or node ids themselves (then the session adds none)."""
    previous = ""
    for arg in posargs:
        if not arg.startswith("-") and previous not in VALUE_OPTIONS:
            if "::" in arg or (root / arg).exists():
                return True
        previous = arg if "=" not in arg else ""
    return False


def worker_args(device: DeviceKind, posargs: Sequence[str], gpus: int) -> list[str]:
    """xdist workers: one per core on a CPU device kind, one per GPU on a GPU kind — a worker
    even for one GPU, so that a vendor library that aborts the process (AITER's missing
    kernel) takes one test down, reported as its error, not the run (none without a GPU)."""
    if any(arg.startswith(("-n", "--numprocesses")) for arg in posargs):
        return []
    if not device.is_gpu:
        return ["-n", "auto"]  # with OMP_NUM_THREADS=1
    return ["-n", str(gpus)] if gpus >= 1 else []


def run_target(backend: str, session_target: Target) -> Target:
    """Whose declaration a session's run follows (device kind, environment): the chosen
    backend's, else (a plug-in the nox process cannot see) the session's own target's."""
    return declared(backend, load_plugins=False) or session_target


def run_outcome(junit: Path, since: float) -> dict[str, object] | None:
    """The sidecar the run writing `junit` left (full or partial), if written after `since`."""
    candidates = [sidecar_path(junit), sidecar_path(partial_junit_path(junit))]
    fresh = [path for path in candidates if path.exists() and path.stat().st_mtime >= since]
    if not fresh:
        return None
    newest = max(fresh, key=lambda path: path.stat().st_mtime)
    try:
        document = json.loads(newest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def skip_reason(outcome: Mapping[str, object] | None, backend: str) -> str | None:
    """Why `backend` could not run (its sidecar says unavailable), or None when it ran."""
    if outcome is None or outcome.get("available") is not False:
        return None
    return f"{backend}: {outcome.get('availability_reason') or 'backend not available'}"
