"""Partial selections: a run that leaves out part of the conformance set on purpose.

A run narrowed with ``-k``, ``-m``, ``--deselect``, ``--ignore`` or explicit paths / node ids
below ``tests/conformance`` can never be signed off, so it must never supersede the full
report of its backend: its conventional JUnit file (``reports/junit/cpu.xml``) is written to
``reports/junit/partial/cpu.xml`` instead, and its sidecar says ``"selection": "partial"``
with the reason (``"selection_reason"``). Shards are full selections: each is a complete part.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.harness.plugin import CONFORMANCE_TESTS


def _covers_conformance(arg: str, root: Path, invocation_dir: Path) -> bool:
    """Whether a positional argument names ``tests/conformance`` or a directory above it."""
    if "::" in arg:
        return False
    path = Path(arg)
    path = (path if path.is_absolute() else invocation_dir / path).resolve()
    target = (root / CONFORMANCE_TESTS).resolve()
    return path == target or path in target.parents


def partial_reason(config: pytest.Config) -> str | None:
    """Why this run's selection is partial (``"-k persistent"``), or None for a full one."""
    option = config.option
    reasons = []
    if getattr(option, "keyword", ""):
        reasons.append(f"-k {option.keyword}")
    if getattr(option, "markexpr", ""):
        reasons.append(f"-m {option.markexpr}")
    for name, flag in (("deselect", "--deselect"), ("ignore", "--ignore")):
        for value in getattr(option, name, None) or []:
            reasons.append(f"{flag} {value}")
    for value in getattr(option, "ignore_glob", None) or []:
        reasons.append(f"--ignore-glob {value}")
    invocation_dir = Path(config.invocation_params.dir)
    args = [str(arg) for arg in config.args]
    if config.args_source == pytest.Config.ArgsSource.ARGS and not any(
        _covers_conformance(arg, config.rootpath, invocation_dir) for arg in args
    ):
        reasons.append("selected " + " ".join(args))
    return "; ".join(reasons) or None
