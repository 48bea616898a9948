"""What the report plugin learns during one pytest session (`RunState`), and where it lives."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.harness.plugin import chosen_backend
from conformance.runs.names import Shard


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class RunState:
    """What the plugin learns during one session (kept in ``config.stash``)."""

    backend: str
    shard: Shard | None
    junit_path: Path | None
    expectations_file: Path
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: str = field(default_factory=now)
    selection: str = "full"
    selection_reason: str | None = None
    shard_algorithm: str | None = None
    conformance_collected: bool = False
    collected_ids: list[str] | None = None
    selected_ids: list[str] | None = None
    filtered_out: int = 0
    stale_expectations: list[str] = field(default_factory=list)
    sharding_now: bool = False
    pinned: dict[str, str] = field(default_factory=dict)
    worker_reports: list[dict[str, Any]] = field(default_factory=list)


STATE_KEY = pytest.StashKey[RunState]()


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (not the controller)."""
    return hasattr(config, "workerinput")


def backend_name(config: pytest.Config) -> str:
    """The backend under test, as the conformance plugin resolved it (`chosen_backend`)."""
    return chosen_backend(config)


def junit_path(config: pytest.Config) -> Path | None:
    """The absolute ``--junitxml`` path, or None without one."""
    xml_path = getattr(config.option, "xmlpath", None)
    if not xml_path:
        return None
    expanded = os.path.expanduser(os.path.expandvars(xml_path))
    return Path(os.path.normpath(os.path.abspath(expanded)))


def relative(path: Path, root: Path) -> str:
    """`path` relative to the run's root directory when it lies below it (no machine paths)."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
