"""The records the sign-off stages pass to each other."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.runs.names import Shard
from conformance.targets import default_names, release_names

DEFAULT_BACKENDS: tuple[str, ...] = default_names()
RELEASE_BACKENDS: tuple[str, ...] = release_names()


class Outcome(str, enum.Enum):
    """The outcome of one test after classification."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    XFAIL = "xfail"
    EXPECTED_SKIP = "expected-skip"
    NOT_APPLICABLE = "not-applicable"  # skipped: ``not applicable: <why>`` (backend declaration)
    UNAVAILABLE = "unavailable"
    SKIPPED = "skipped"  # a skip nothing explains

    @property
    def severity(self) -> int:
        """Order used when one id has several results in one file (worst wins)."""
        return _SEVERITY[self]


_SEVERITY: dict[Outcome, int] = {
    Outcome.PASSED: 0,
    Outcome.XFAIL: 1,
    Outcome.NOT_APPLICABLE: 2,
    Outcome.EXPECTED_SKIP: 2,
    Outcome.UNAVAILABLE: 3,
    Outcome.SKIPPED: 4,
    Outcome.FAILED: 5,
    Outcome.ERROR: 6,
}
OUTCOME_ORDER: tuple[Outcome, ...] = tuple(Outcome)


class Status(str, enum.Enum):
    """The sign-off status of one backend."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCOMPLETE = "INCOMPLETE"
    STALE = "STALE"  # evidence made from files that have changed since
    NOT_RUN = "NOT RUN"


class Verdict(str, enum.Enum):
    """The overall verdict; `exit_code` is what the command returns."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCOMPLETE = "INCOMPLETE"

    @property
    def exit_code(self) -> int:
        """0 PASS, 1 FAIL, 3 INCOMPLETE (2 is left to usage errors)."""
        return {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.INCOMPLETE: 3}[self]


@dataclass
class CaseResult:
    """One test as a JUnit file reports it (several ``<testcase>`` of one id are merged)."""

    node_id: str
    family: str
    outcome: Outcome
    message: str
    detail: str
    properties: dict[str, str]
    time: float
    source: str  # the JUnit file name
    duplicated: bool = False  # the id appeared twice in its file, not as pytest's teardown pair


@dataclass
class RunReport:
    """One JUnit file of a backend, with its sidecar."""

    path: Path
    backend: str
    shard: Shard | None
    cases: list[CaseResult]
    suite_name: str | None
    suite_properties: dict[str, str]
    sidecar: dict[str, Any] | None
    sidecar_path: Path | None
    root: Any = field(default=None, repr=False)  # the parsed XML, for the merge
    declared_tests: int | None = None  # the suite's ``tests`` attribute
    sha256: str = ""  # of the file's bytes as read


@dataclass
class BackendInput:
    """Everything found for one backend: its runs, and what could not be read."""

    backend: str
    runs: list[RunReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # file-level errors, each names the file
    broken_files: list[Path] = field(default_factory=list)  # present but unreadable JUnit
    orphan_sidecars: list[Path] = field(default_factory=list)  # sidecar without JUnit
    orphan_documents: dict[Path, dict[str, Any]] = field(default_factory=dict)  # readable ones
    source: str = "local"  # "local" or "evidence"
    evidence_date: str | None = None
    evidence_path: Path | None = None
    evidence_facts: dict[str, Any] | None = None
    stale: list[str] = field(default_factory=list)  # why the evidence no longer holds
    shadowed: list[str] = field(default_factory=list)  # local files evidence stood in for

    @property
    def has_input(self) -> bool:
        """Whether any file at all was found for this backend."""
        return bool(self.runs or self.problems or self.broken_files or self.orphan_sidecars)


@dataclass
class Completeness:
    """How the reported ids compare with the ids the backend should have run."""

    expected_source: str  # "sidecar", "collect" or "unknown"
    expected_count: int
    missing: dict[str, list[str]]  # file that should have reported them -> ids
    duplicates: dict[str, list[str]]  # id -> files that reported it
    unexpected: list[str]
    issues: list[str]


@dataclass
class BackendResult:
    """The sign-off of one backend."""

    backend: str
    status: Status
    required: bool
    reason: str
    input: BackendInput
    cases: list[CaseResult]
    completeness: Completeness | None
    issues: list[str]
    warnings: list[str]
    stale_expectations: list[str]
    code: str | None = None  # the sign-off check behind ``reason`` (None: PASS or NOT RUN)
    expectation_files: list[dict[str, Any]] = field(default_factory=list)  # expectation_files


@dataclass
class SignoffResult:
    """The whole sign-off."""

    verdict: Verdict
    required: list[str]
    required_source: str
    backends: dict[str, BackendResult]
    errors: list[str]  # problems not attributable to one backend (unknown backend, ...)
    warnings: list[str]
    blocking: list[str]  # why the verdict is not PASS, one line each
    generated_at: str
    reports_dir: Path
    outputs: dict[str, Path] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None  # an earlier signoff.json (``--baseline``)
    root: Path | None = None  # the repository: paths in the reports are relative to it
    release: bool = False  # a release sign-off (``--release``)
