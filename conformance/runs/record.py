"""`RunRecord`: the report a run leaves beside its JUnit file (its sidecar), as a type.

Every writer fills one: the pytest plugin for a backend's run (`SessionFacts`), the engine
session for an engine's (`EngineRun`). `RunRecord.to_json` is the one place the sidecar's keys
are laid out; its JSON is what the sign-off has always read (the committed evidence included),
key for key and in the same order. A value the process that ran the tests could not learn
(``available``, ``declaration``, ...) is left out rather than written as null.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from conformance.target_types import ENGINE

SIDECAR_FORMAT_PREFIX = "mla-conformance-run/"
SIDECAR_FORMAT = SIDECAR_FORMAT_PREFIX + "1"


@dataclass(frozen=True)
class MachineFacts:
    """The machine and software a run used (`conformance.runs.provenance.machine_facts`)."""

    device: str | None
    python: str
    platform: str
    hostname: str
    versions: Mapping[str, str | None]
    torch_cuda: str | None
    torch_hip: str | None
    git_commit: str | None
    git_dirty: bool | None

    def to_json(self) -> dict[str, Any]:
        """The facts as sidecar keys, in the sidecar's order (the fields')."""
        facts = {fact.name: getattr(self, fact.name) for fact in fields(self)}
        return facts | {"versions": dict(self.versions)}


@dataclass(frozen=True)
class SessionFacts:
    """What the pytest plugin records of a backend's run: the session, and what the process
    that ran the tests learnt (None where it learnt nothing: the key is left out)."""

    run_id: str
    started: str
    finished_at: str | None
    args: Sequence[str]
    xdist_workers: int
    shard_algorithm: str | None
    expectations_file: str
    expectations_sha256: str | None
    devices: Sequence[str]
    """Every device the run used: its xdist workers', else its own."""
    collected_ids: Sequence[str] | None = None
    selected_ids: Sequence[str] | None = None
    filtered_out: int | None = None
    conformance_collected: bool | None = None
    stale_expectations: Sequence[str] | None = None
    available: bool | None = None
    availability_reason: str | None = None
    declaration: Mapping[str, Any] | None = None
    backend_provenance: Mapping[str, str] | None = None
    gpus: Sequence[str] | None = None
    pinned: Mapping[str, str] | None = None


@dataclass(frozen=True)
class EngineRun:
    """What the engine session records of an engine's run."""

    version: str
    builders: Mapping[str, str]
    """Each builder's status in the facts file."""
    pins_replaced: Sequence[str]
    facts: str
    """The facts file, as the session named it."""
    counts: Mapping[str, int]
    """tests, failures, errors and skipped of its JUnit file."""
    stood_in: Sequence[str] | None = None
    """The engine's modules its tests stood in (a GPU target's facts name them); None: the
    facts say nothing of stand-ins (the key is left out)."""
    gpus: Sequence[str] | None = None
    """The GPUs its tests saw (a GPU target's facts name them); None: the key is left out."""


@dataclass(frozen=True)
class RunRecord:
    """One run's sidecar: what ran (backend, JUnit file, shard, selection), how it ended, on
    which machine and device kind, and a backend run's `session` or an engine run's `engine`."""

    backend: str
    junit: str | None
    machine: MachineFacts
    finished: bool
    exitstatus: int | None
    shard: str | None = None
    selection: str = "full"
    selection_reason: str | None = None
    device_kind: str | None = None
    session: SessionFacts | None = None
    engine: EngineRun | None = None
    junit_sha256: str | None = None
    """The sha256 of the finished JUnit file (a backend run's is added once pytest wrote it:
    `conformance.runs.sidecar.seal_sidecar`)."""
    format: str = field(default=SIDECAR_FORMAT)

    def __post_init__(self) -> None:
        if (self.session is None) == (self.engine is None):
            raise ValueError(f"run of {self.backend}: expected a session or an engine run")

    def to_json(self) -> dict[str, Any]:
        """The sidecar's JSON object."""
        if self.engine is not None:
            return self._engine_json(self.engine)
        assert self.session is not None
        return self._session_json(self.session)

    def _session_json(self, session: SessionFacts) -> dict[str, Any]:
        learnt = {
            "collected_ids": _listed(session.collected_ids),
            "selected_ids": _listed(session.selected_ids),
            "filtered_out": session.filtered_out,
            "conformance_collected": session.conformance_collected,
            "stale_expectations": _listed(session.stale_expectations),
            "available": session.available,
            "availability_reason": session.availability_reason,
            "device_kind": self.device_kind,
            "declaration": _mapped(session.declaration),
            "backend_provenance": _mapped(session.backend_provenance),
            "gpus": _listed(session.gpus),
            "pinned": _mapped(session.pinned),
        }
        document = {
            "format": self.format,
            "backend": self.backend,
            "shard": self.shard,
            "shard_algorithm": session.shard_algorithm,
            "selection": self.selection,
            "selection_reason": self.selection_reason,
            "junit": self.junit,
            "run_id": session.run_id,
            "started": session.started,
            "finished_at": session.finished_at,
            "finished": self.finished,
            "exitstatus": self.exitstatus,
            "args": list(session.args),
            "xdist_workers": session.xdist_workers,
            "expectations_file": session.expectations_file,
            "expectations_sha256": session.expectations_sha256,
            **self.machine.to_json(),
            **{key: value for key, value in learnt.items() if value is not None},
            "devices": list(session.devices),
        }
        if self.junit_sha256 is not None:
            document["junit_sha256"] = self.junit_sha256
        return document

    def _engine_json(self, engine: EngineRun) -> dict[str, Any]:
        return {
            "format": self.format,
            "backend": self.backend,
            "kind": ENGINE,
            "engine": {
                "name": self.backend,
                "version": engine.version,
                "builders": dict(engine.builders),
                "pins_replaced": list(engine.pins_replaced),
                **({} if engine.stood_in is None else {"stood_in": list(engine.stood_in)}),
            },
            "junit": self.junit,
            "junit_sha256": self.junit_sha256,
            "shard": self.shard,
            "selection": self.selection,
            **({"selection_reason": self.selection_reason} if self.selection_reason else {}),
            "device_kind": self.device_kind,
            "finished": self.finished,
            "exitstatus": self.exitstatus,
            "facts": engine.facts,
            "counts": dict(engine.counts),
            **self.machine.to_json(),
            **({} if engine.gpus is None else {"gpus": list(engine.gpus)}),
        }


def _listed(values: Sequence[Any] | None) -> list[Any] | None:
    return None if values is None else list(values)


def _mapped(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if values is None else dict(values)
