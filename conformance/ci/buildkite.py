"""The conformance jobs as a Buildkite pipeline (``python -m conformance.ci.matrix --format
buildkite``), for ``buildkite-agent pipeline upload``.

One command step per backend session × shard on the agent queue of its device kind, with a
timeout and ``reports/junit/*`` as artifacts; then a wait that lets failed jobs through, and
one release sign-off step over every job's reports. Every step runs nox from a virtual
environment, and the steps on the default (GPU-less) queue take PyTorch's CPU wheels
(`conformance.ci.runner_env`). Strings are written as JSON strings, which YAML reads
unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.ci.runner_env import CPU_WHEELS_ENV, NOX, SETUP
from conformance.targets import CPU, DEVICE_KINDS

DEFAULT_QUEUE = CPU.queue
SIGNOFF_TIMEOUT_MINUTES = 20


def _queue(job: Mapping[str, Any]) -> str:
    """The agent queue of the device kind whose runner the job runs on."""
    runner = job.get("runs_on")
    labels = tuple(runner) if isinstance(runner, list) else runner
    for kind in DEVICE_KINDS.values():
        if kind.runner == labels:
            return kind.queue
    return DEFAULT_QUEUE


def steps(jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pipeline's steps for the matrix ``jobs`` (`conformance.ci.matrix.build_matrix`)."""
    result: list[dict[str, Any]] = []
    for job in jobs:
        posargs = f" -- {job['posargs']}" if job.get("posargs") else ""
        queue = _queue(job)
        step: dict[str, Any] = {
            "label": f"conformance {job['name']}",
            "key": str(job["artifact"]).replace(".", "-"),
            "command": f"{SETUP} && {NOX} -s '{job['session']}'{posargs}",
            "agents": {"queue": queue},
            "timeout_in_minutes": int(job["timeout_minutes"]),
            "artifact_paths": ["reports/junit/*"],
        }
        if queue == DEFAULT_QUEUE:
            step["env"] = dict(CPU_WHEELS_ENV)
        result.append(step)
    result.append({"wait": None, "continue_on_failure": True})
    result.append(
        {
            "label": "release sign-off",
            "key": "signoff",
            "command": "buildkite-agent artifact download 'reports/junit/*' . && "
            f"{SETUP} && {NOX} -s signoff -- --release",
            "agents": {"queue": DEFAULT_QUEUE},
            "env": dict(CPU_WHEELS_ENV),
            "timeout_in_minutes": SIGNOFF_TIMEOUT_MINUTES,
            "artifact_paths": ["reports/conformance.xml", "reports/signoff.*"],
        }
    )
    return result


def _yaml(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        lines = []
        for key, item in value.items():
            if isinstance(item, Mapping | list) and item:
                lines.append(f"{pad}{key}:")
                lines.extend(_yaml(item, indent + 2))
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            inner = _yaml(item, indent + 2)
            lines.append(f"{pad}- {inner[0].lstrip()}" if inner else f"{pad}- []")
            lines.extend(inner[1:])
        return lines
    return [f"{pad}{_scalar(value)}"]


def _scalar(value: Any) -> str:
    if value is None:
        return "~"
    if isinstance(value, Mapping | list):
        return "{}" if isinstance(value, Mapping) else "[]"
    return json.dumps(value)


def pipeline_yaml(jobs: Sequence[Mapping[str, Any]]) -> str:
    """The Buildkite pipeline YAML for the matrix ``jobs``."""
    return "\n".join(["steps:", *_yaml(steps(jobs), 2)]) + "\n"
