"""What an engine run leaves: its JUnit counts, its sidecar, the audit of ``--tree``.

The sidecar (``<junit>.meta.json``) names the engine release, each builder's status from the
facts file, the replaced pins, the selection (a partial one with its reason) and the run's
provenance; `audit_tree` runs ``python -m conformance audit TREE --facts FILE``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from conformance.runs.provenance import machine_facts
from conformance.runs.record import EngineRun, RunRecord
from conformance.runs.sidecar import write_sidecar as write_run_sidecar
from conformance.target_types import EngineTarget


def junit_counts(path: Path) -> dict[str, int]:
    """tests, failures, errors, skipped of a JUnit file (zeros if unreadable)."""
    import xml.etree.ElementTree as ET

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return counts
    for suite in [root] if root.tag == "testsuite" else root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    return counts


def environment_versions(python: str, target: EngineTarget) -> dict[str, str | None]:
    """Versions of the engine, torch and triton in the engine's environment."""
    names = [target.distribution, "torch", "triton", "transformers", "flashinfer-python"]
    code = (
        "import importlib.metadata as m, json\n"
        "def v(n):\n"
        "    try:\n"
        "        return m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        return None\n"
        f"print(json.dumps({{n: v(n) for n in {names!r}}}))"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if result.returncode or not result.stdout.strip():
        return {}
    return json.loads(result.stdout.strip().splitlines()[-1])


def write_sidecar(
    junit: Path,
    facts_file: Path,
    *,
    target: EngineTarget,
    version: str,
    versions: Mapping[str, str | None],
    exitstatus: int,
    selection: str | None,
    pins: Sequence[str] = (),
) -> None:
    """The run's ``.meta.json``: provenance naming the engine release and the builders run."""
    facts: dict[str, Any] = {}
    if facts_file.exists():
        facts = json.loads(facts_file.read_text(encoding="utf-8"))
    machine = machine_facts(target.name, Path.cwd())
    run = EngineRun(
        version=version,
        builders={n: b["status"] for n, b in facts.get("builders", {}).items()},
        pins_replaced=list(pins),
        facts=facts_file.as_posix(),
        counts=junit_counts(junit),
        stood_in=facts.get("stood_in"),
        gpus=facts.get("gpus"),
    )
    record = RunRecord(
        backend=target.name,
        junit=junit.name,
        # the engine's environment, not the interpreter running nox
        machine=replace(machine, versions=dict(versions)),
        finished=True,
        exitstatus=exitstatus,
        selection="full" if selection is None else "partial",
        selection_reason=selection,
        device_kind=target.device_kind,
        engine=run,
        junit_sha256=hashlib.sha256(junit.read_bytes()).hexdigest() if junit.exists() else None,
    )
    write_run_sidecar(junit, record)


def disk_use(path: Path) -> int:
    """Bytes under `path` (files only, links not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def audit_tree(tree: Path, facts_file: Path, log: Any) -> int:
    """``python -m conformance audit TREE --facts FILE``: its output, and its exit code."""
    command = [sys.executable, "-m", "conformance", "audit", str(tree), "--facts", str(facts_file)]
    log(" ".join(["python", *command[1:]]))
    result = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode
