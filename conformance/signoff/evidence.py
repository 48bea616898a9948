"""Committed GPU evidence: the reports of a run made elsewhere, kept in the repository.

Layout: ``reports/evidence/<YYYY-MM-DD>-<backend>/`` holding the JUnit file(s) of one backend
(``cuda.xml`` or ``cuda-shard-I-of-N.xml``), their ``*.meta.json`` sidecars, and
``versions.json`` (device, versions, where the run was made, and the fingerprint: the commit
and the sha256 of the files that decide the backend's behaviour). `save_evidence` makes such a
directory from ``reports/junit``. The sign-off uses the newest evidence of a backend when this
checkout has no report of its own for it, or only one in which every test was skipped, and
marks it with its date and source; evidence whose files have changed since is STALE.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.runs.atomic import atomic_write_bytes, atomic_write_text, current_umask
from conformance.runs.names import parse_junit_name
from conformance.runs.provenance import git_facts
from conformance.runs.sidecar import MACHINE_FACTS
from conformance.signoff.checks import UNUSABLE_EVIDENCE_DIRECTORY
from conformance.signoff.discovery import SIDECAR_SUFFIX, discover
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.fingerprint import FINGERPRINT_KEY, changed_files, fingerprint
from conformance.signoff.integrity import integrity_issues
from conformance.signoff.issue import Issue
from conformance.signoff.loading import MAX_JUNIT_BYTES, load_json_object, load_sidecar
from conformance.signoff.model import BackendInput, Outcome

EVIDENCE_DIR_PATTERN = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2})-(?P<backend>[A-Za-z0-9_.]+)$")
VERSIONS_FILE = "versions.json"
MACHINE_FILE = "machine.json"  # written by the GPU scripts (scripts/machine_info.py)


@dataclass(frozen=True)
class EvidenceSet:
    """One evidence directory."""

    date: str
    backend: str
    path: Path


@dataclass
class EvidenceIndex:
    """The newest evidence per backend, and what was wrong with the evidence directory."""

    newest: dict[str, EvidenceSet] = field(default_factory=dict)
    older: list[EvidenceSet] = field(default_factory=list)
    errors: list[Issue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def find_evidence(root: Path, *, known_backends: Collection[str]) -> EvidenceIndex:
    """Index ``<root>/<date>-<backend>/`` directories; the newest date wins per backend."""
    index = EvidenceIndex()
    if not root.is_dir():
        return index
    candidates: list[EvidenceSet] = []
    for path in sorted(root.iterdir()):
        if not path.is_dir():
            continue
        match = EVIDENCE_DIR_PATTERN.match(path.name)
        if match is None:
            index.warnings.append(f"{path}: not named <YYYY-MM-DD>-<backend>; ignored")
            continue
        try:
            dt.date.fromisoformat(match.group("date"))
        except ValueError:
            index.errors.append(
                UNUSABLE_EVIDENCE_DIRECTORY.issue(
                    f"{path}: {match.group('date')!r} is not a valid date"
                )
            )
            continue
        if match.group("backend") not in known_backends:
            index.errors.append(
                UNUSABLE_EVIDENCE_DIRECTORY.issue(
                    f"{path}: evidence for unknown backend {match.group('backend')!r}; not counted"
                )
            )
            continue
        candidates.append(EvidenceSet(match.group("date"), match.group("backend"), path))
    for evidence in sorted(candidates, key=lambda item: item.date):
        previous = index.newest.get(evidence.backend)
        if previous is not None:
            index.older.append(previous)
        index.newest[evidence.backend] = evidence
    return index


def load_evidence(
    evidence: EvidenceSet, *, known_backends: Collection[str], limit: int = MAX_JUNIT_BYTES
) -> BackendInput:
    """The `BackendInput` of one evidence directory, marked with its date and source."""
    found = discover(evidence.path, known_backends=known_backends, limit=limit)
    target = found.inputs.pop(evidence.backend, None) or BackendInput(evidence.backend)
    target.source = "evidence"
    target.evidence_date = evidence.date
    target.evidence_path = evidence.path
    target.problems.extend(found.errors)
    for other in found.inputs.values():
        for run in other.runs:
            target.problems.append(
                f"{run.path}: a {other.backend} report inside {evidence.backend} evidence; "
                "not counted"
            )
    for backend, paths in found.not_installed.items():
        target.problems += [
            f"{path}: a {backend} report inside {evidence.backend} evidence; not counted"
            for path in paths
        ]
    if not (target.runs or target.broken_files or target.orphan_sidecars):
        target.problems.append(f"{evidence.path}: evidence directory has no JUnit report")
    versions = evidence.path / VERSIONS_FILE
    if versions.exists():
        try:
            target.evidence_facts = load_json_object(versions)
        except SignoffInputError as error:
            target.problems.append(str(error))
    else:
        target.evidence_facts = None
    target.problems += machine_record_conflicts(evidence.path, target.evidence_facts)
    return target


def machine_record_conflicts(path: Path, facts: dict[str, Any] | None) -> list[str]:
    """Where the GPU script's own record of the run (``machine.json``, beside the reports)
    names another device or commit than the evidence's facts: one of the two was edited."""
    record_path = path / MACHINE_FILE
    if facts is None or not record_path.exists():
        return []
    try:
        record = load_json_object(record_path)
    except SignoffInputError as error:
        return [str(error)]
    conflicts = []
    for key in ("device", "git_commit"):
        mine, theirs = record.get(key), facts.get(key)
        if not (isinstance(mine, str) and isinstance(theirs, str)) or "unknown" in (mine, theirs):
            continue
        agree = same_commit(mine, theirs) if key == "git_commit" else mine == theirs
        if not agree:
            conflicts.append(
                f"{record_path}: {key} {mine!r}, but {VERSIONS_FILE} and the sidecars say "
                f"{theirs!r} (one of them was edited after the run)"
            )
    return conflicts


def evidence_refusal(
    junit_dir: Path,
    backend: str,
    *,
    root: Path,
    expected_kind: str | None,
    known_backends: Collection[str],
) -> str | None:
    """Why ``backend``'s reports in ``junit_dir`` must not become evidence (None: they may)."""
    found = discover(junit_dir, known_backends=set(known_backends) | {backend})
    backend_input = found.inputs.get(backend)
    if backend_input is None or not backend_input.runs:
        return f"has no readable JUnit report of backend {backend!r}"
    problems = list(backend_input.problems)
    problems += integrity_issues(backend_input, expected_kind=expected_kind)
    if problems:
        return f"the {backend} reports cannot be trusted: {problems[0]}"
    cases = [case for run in backend_input.runs for case in run.cases]
    if not any(case.outcome == Outcome.PASSED for case in cases):
        first = next((case.message for case in cases if case.message), "")
        return (
            f"no {backend} test passed ({len(cases)} reported"
            + (f"; first reason: {first}" if first else "")
            + "): that is no evidence of the backend"
        )
    here = git_facts(root).get("git_commit")
    for run in backend_input.runs:
        made_at = (run.sidecar or {}).get("git_commit")
        if here and made_at and not same_commit(str(made_at), str(here)):
            return (
                f"{run.path.name} was made at commit {made_at}, this checkout is at {here}: "
                "the file hashes recorded now would not be those of the run"
            )
    return None


def same_commit(a: str, b: str) -> bool:
    """Whether two commit names agree: equal, or one an abbreviation (7+ hex digits) of the
    other, as ``MLA_CONFORMANCE_GIT_COMMIT=<short sha>`` gives."""
    a, b = a.strip().lower(), b.strip().lower()
    if a == b:
        return True
    short, full = sorted((a, b), key=len)
    hexdigits = set("0123456789abcdef")
    return len(short) >= 7 and set(short) <= hexdigits and full.startswith(short)


def evidence_staleness(backend_input: BackendInput, *, root: Path) -> list[str]:
    """Why evidence no longer describes the checkout at ``root`` (empty when it does)."""
    recorded = (backend_input.evidence_facts or {}).get(FINGERPRINT_KEY)
    if not isinstance(recorded, dict):
        return ["no file hashes recorded"]
    return changed_files(recorded, backend_input.backend, root)


def save_evidence(
    junit_dir: Path,
    backend: str,
    evidence_root: Path,
    *,
    root: Path,
    expected_kind: str | None,
    known_backends: Collection[str] = (),
    date: dt.date | None = None,
) -> Path:
    """Copy ``backend``'s reports and sidecars from ``junit_dir`` into a new evidence directory.

    Refuses reports in which no test passed, from the wrong kind of device, or whose claims
    disagree (`evidence_refusal`). Writes ``versions.json`` from the sidecars, with the
    fingerprint of the backend's files. The directory is filled under a temporary name and
    renamed when complete; an existing directory is never overwritten.
    """
    day = (date or dt.date.today()).isoformat()
    target = evidence_root / f"{day}-{backend}"
    if target.exists():
        raise SignoffInputError(target, "already exists; evidence is never overwritten")
    files = []
    for path in sorted(junit_dir.glob("*.xml")):
        try:
            name_backend, _ = parse_junit_name(path.name)
        except ValueError:
            continue
        if name_backend == backend:
            files.append(path)
    if not files:
        raise SignoffInputError(junit_dir, f"has no JUnit report of backend {backend!r}")
    refusal = evidence_refusal(
        junit_dir, backend, root=root, expected_kind=expected_kind, known_backends=known_backends
    )
    if refusal:
        raise SignoffInputError(junit_dir, f"{refusal}; no evidence saved")
    evidence_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=evidence_root))
    try:
        copied, facts = _copy_reports(files, staging)
        document = {
            "backend": backend,
            "date": day,
            "source": f"{facts.get('hostname') or 'unknown host'} "
            f"at commit {facts.get('git_commit') or 'unknown'}",
            "files": copied,
            **facts,
            FINGERPRINT_KEY: fingerprint(backend, root),
        }
        atomic_write_text(staging / VERSIONS_FILE, json.dumps(document, indent=2) + "\n")
        os.chmod(staging, 0o777 & ~current_umask())
        if target.exists():
            raise SignoffInputError(target, "already exists; evidence is never overwritten")
        os.rename(staging, target)  # all files appear at once, or none
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _copy_reports(files: list[Path], target: Path) -> tuple[list[str], dict[str, Any]]:
    """Copy each JUnit file and its sidecar into `target`; the names and the first facts."""
    facts: dict[str, Any] = {}
    copied = []
    for path in files:
        companions = [path, path.with_name(path.name.removesuffix(".xml") + SIDECAR_SUFFIX)]
        for source in companions:
            if source.exists():
                atomic_write_bytes(target / source.name, source.read_bytes())
                copied.append(source.name)
        sidecar = companions[1]
        if sidecar.exists() and not facts:
            document = load_sidecar(sidecar)
            facts = {key: document.get(key) for key in MACHINE_FACTS}
    return copied, facts
