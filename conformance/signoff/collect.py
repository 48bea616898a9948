"""``--collect``: the ids a backend should run, from a fresh ``pytest --collect-only``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.runs.environment import BACKEND_VARIABLE
from conformance.signoff.errors import SignoffInputError

CONFORMANCE_TESTS = "tests/conformance"
COLLECT_TIMEOUT_S = 600


def collect_command(backend: str, *, tests: str = CONFORMANCE_TESTS) -> list[str]:
    """The pytest command line that lists ``backend``'s conformance ids."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "--backend",
        backend,
        tests,
    ]


def parse_collect_output(text: str) -> list[str]:
    """Node ids from ``pytest --collect-only -q`` output (the lines before the first blank)."""
    ids = []
    for line in text.splitlines():
        if not line.strip():
            break
        if "::" in line:
            ids.append(line.strip())
    return ids


def collect_ids(backend: str, *, root: Path, command: Sequence[str] | None = None) -> list[str]:
    """Run the collection in ``root``; raise `SignoffInputError` if pytest fails."""
    arguments = list(command) if command is not None else collect_command(backend)
    try:
        completed = subprocess.run(
            arguments,
            cwd=root,
            env={**os.environ, BACKEND_VARIABLE: backend},
            capture_output=True,
            text=True,
            timeout=COLLECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise SignoffInputError(root, f"cannot run {' '.join(arguments)}: {error}") from None
    if completed.returncode not in (0, 5):
        tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-5:])
        raise SignoffInputError(
            root,
            f"collecting {backend} failed (pytest exit {completed.returncode}): {tail}",
        )
    return parse_collect_output(completed.stdout)
