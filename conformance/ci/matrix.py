"""The CI jobs of a conformance run, built from ``nox --json -l``.

``nox --json -l -t cpu gpu | python -m conformance.ci.matrix --shards cuda=4,rocm=2`` prints
the GitHub Actions matrix ``{"include": [...]}``: one job per backend session × shard, each
with its runner labels (``cpu``-tagged sessions on ``ubuntu-latest``, ``cuda`` on
``[self-hosted, nvidia]``, ``rocm`` on ``[self-hosted, amd]``), its timeout, the nox posargs
that select its shard, and the artifact name its ``reports/junit/`` is uploaded under. Runner
and timeout come from the device kind of the backend (`conformance.targets`); a backend the
suite does not declare (a plug-in's session) runs on the kind its tags name.
``--format buildkite`` prints the same jobs as a Buildkite pipeline
(`conformance.ci.buildkite`), ending with a release sign-off step. A session is a backend
session when it carries one of the tags ``cpu``, ``gpu``, ``cuda``, ``rocm``; its backend is
the ``backend`` parameter of a parametrized session, else the session name.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.runs.names import Shard, junit_name
from conformance.target_types import DeviceKind
from conformance.targets import CPU, DEVICE_KINDS, device_of

DEFAULT_RUNNER = CPU.runner
DEFAULT_TIMEOUT_MINUTES = CPU.timeout_minutes


def backend_tags() -> frozenset[str]:
    """The nox tags of every device kind: a session with one of them is a backend session."""
    return frozenset(tag for kind in DEVICE_KINDS.values() for tag in kind.tags)


class MatrixError(ValueError):
    """Bad nox listing or shard specification; the message names the entry."""


def parse_shard_counts(text: str) -> dict[str, int]:
    """``"cuda=4,rocm=2"`` → ``{"cuda": 4, "rocm": 2}``."""
    counts: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        backend, separator, number = item.partition("=")
        if not separator or not backend.strip() or not number.strip().isdigit():
            raise MatrixError(f"--shards entry {item!r} is not BACKEND=N (for example cuda=4)")
        if int(number) < 1:
            raise MatrixError(f"--shards entry {item!r}: N must be at least 1")
        counts[backend.strip()] = int(number)
    return counts


def device_for(backend: str, tags: Sequence[str]) -> DeviceKind:
    """The device kind a backend session runs on: the declared one, else the one its tags
    name (a GPU kind before the CPU), else the CPU."""
    declared = device_of(backend, load_plugins=False)
    if declared is not None:
        return declared
    named = [kind for kind in DEVICE_KINDS.values() if kind.name in tags]
    named.sort(key=lambda kind: not kind.is_gpu)
    return named[0] if named else CPU


def runner_for(backend: str, tags: Sequence[str]) -> str | list[str]:
    """Runner labels for the session of ``backend`` with ``tags``."""
    runner = device_for(backend, tags).runner
    return list(runner) if isinstance(runner, tuple) else runner


def timeout_for(backend: str, tags: Sequence[str]) -> int:
    """Minutes a job of the session of ``backend`` may run before CI cancels it."""
    return device_for(backend, tags).timeout_minutes


def _backend_sessions(sessions: Any) -> list[tuple[str, str, list[str]]]:
    if not isinstance(sessions, list):
        raise MatrixError("nox --json -l output is not a JSON list")
    found = []
    for index, entry in enumerate(sessions):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("session"), str):
            raise MatrixError(f"nox listing entry #{index} has no 'session' string: {entry!r}")
        tags = entry.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise MatrixError(f"nox session {entry['session']!r}: 'tags' is not a list of strings")
        if not backend_tags().intersection(tags):
            continue
        call_spec = entry.get("call_spec") or {}
        backend = call_spec.get("backend") if isinstance(call_spec, Mapping) else None
        backend = str(backend or entry.get("name") or entry["session"])
        found.append((entry["session"], backend, list(tags)))
    return found


def build_matrix(sessions: Any, shard_counts: Mapping[str, int]) -> dict[str, list[dict[str, Any]]]:
    """The ``{"include": [...]}`` matrix for ``sessions`` (parsed ``nox --json -l`` output)."""
    backend_sessions = _backend_sessions(sessions)
    backends = {backend for _, backend, _ in backend_sessions}
    unknown = sorted(set(shard_counts) - backends)
    if unknown:
        raise MatrixError(
            f"--shards names {unknown}, but nox lists no such backend session "
            f"(backend sessions: {sorted(backends)})"
        )
    include: list[dict[str, Any]] = []
    for session, backend, tags in backend_sessions:
        count = shard_counts.get(backend, 1)
        shards: list[Shard | None] = (
            [None] if count == 1 else [Shard(index, count) for index in range(1, count + 1)]
        )
        for shard in shards:
            junit = junit_name(backend, shard)
            include.append(
                {
                    "name": backend if shard is None else f"{backend} {shard}",
                    "session": session,
                    "backend": backend,
                    "shard": "" if shard is None else str(shard),
                    "posargs": "" if shard is None else f"--shard {shard}",
                    "runs_on": runner_for(backend, tags),
                    "timeout_minutes": timeout_for(backend, tags),
                    "junit": junit,
                    "artifact": "junit-" + junit.removesuffix(".xml"),
                }
            )
    if not include:
        raise MatrixError("nox lists no backend session (tags cpu, gpu, cuda or rocm)")
    return {"include": include}


RELEASE_TAG = "engine-release"
RELEASE_TIMEOUT_MINUTES = 45


def release_matrix(sessions: Any) -> dict[str, list[dict[str, Any]]]:
    """The engine release matrix: one job per session tagged ``engine-release`` (one release
    of an engine, ``vllm_release(release='0.33.0')``), uploading its facts file."""
    if not isinstance(sessions, list):
        raise MatrixError("nox --json -l output is not a JSON list")
    include = []
    for entry in sessions:
        if not isinstance(entry, Mapping) or RELEASE_TAG not in (entry.get("tags") or []):
            continue
        spec = entry.get("call_spec") or {}
        release = str(spec.get("release", "")) if isinstance(spec, Mapping) else ""
        engine = str(entry.get("name", "")).removesuffix("_release")
        if not release:
            raise MatrixError(f"nox session {entry.get('session')!r}: no release parameter")
        include.append(
            {
                "name": f"{engine} {release}",
                "session": entry["session"],
                "release": release,
                "runs_on": DEFAULT_RUNNER,
                "timeout_minutes": RELEASE_TIMEOUT_MINUTES,
                "artifact": f"engine-facts-{engine}-{release}",
            }
        )
    if not include:
        raise MatrixError(f"nox lists no session tagged {RELEASE_TAG}")
    return {"include": include}


def main(argv: list[str] | None = None) -> int:
    """Read ``nox --json -l`` on stdin, print the matrix (JSON, one line) or the pipeline.

    Exit code 2, with one line on stderr and nothing on stdout, for bad input.
    """
    from conformance.ci.buildkite import pipeline_yaml

    parser = argparse.ArgumentParser(
        prog="python -m conformance.ci.matrix",
        description="Turn `nox --json -l` (stdin) into CI jobs: a GitHub Actions matrix "
        "(JSON) or a Buildkite pipeline (YAML), on stdout.",
    )
    parser.add_argument(
        "--shards", default="", metavar="B=N,...", help="shards per backend, e.g. cuda=4,rocm=2"
    )
    parser.add_argument("--format", choices=("github", "buildkite"), default="github")
    parser.add_argument(
        "--releases",
        action="store_true",
        help="the engine release matrix (sessions tagged engine-release) instead",
    )
    args = parser.parse_args(argv)
    try:
        sessions = json.loads(sys.stdin.read())
        if args.releases:
            print(json.dumps(release_matrix(sessions), separators=(",", ":")))
            return 0
        matrix = build_matrix(sessions, parse_shard_counts(args.shards))
    except ValueError as error:  # MatrixError, and JSON that does not parse
        print(f"conformance.ci.matrix: {error}", file=sys.stderr)
        return 2
    if args.format == "buildkite":
        sys.stdout.write(pipeline_yaml(matrix["include"]))
    else:
        print(json.dumps(matrix, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
