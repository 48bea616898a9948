"""``signoff.json``: the sign-off as data; the Markdown and HTML reports render this dict."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conformance.runs.sidecar import MACHINE_FACTS
from conformance.signoff.baseline import compare
from conformance.signoff.headroom import headroom_rows
from conformance.signoff.issue import code_of
from conformance.signoff.model import (
    DEFAULT_BACKENDS,
    BackendResult,
    CaseResult,
    Outcome,
    SignoffResult,
    Status,
)
from conformance.signoff.paths import relative_document
from conformance.signoff.provenance_warnings import evidence_dirty
from conformance.signoff.verdict import outcome_counts

DOCUMENT_FORMAT = "mla-signoff/2"
MAX_IDS_LISTED = 50
PROBLEM_OUTCOMES = (Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED, Outcome.UNAVAILABLE)
SIGNED_OFF = (Status.PASS,)
RUN_FACTS = (
    "run_id",
    "started",
    "finished_at",
    "finished",
    "exitstatus",
    *MACHINE_FACTS,
    "xdist_workers",
    "available",
    "availability_reason",
)


def backend_order(names: Iterable[str]) -> list[str]:
    """The built-in backends in their usual order, then the others alphabetically."""
    names = set(names)
    return [name for name in DEFAULT_BACKENDS if name in names] + sorted(
        names - set(DEFAULT_BACKENDS)
    )


def _case(case: CaseResult) -> dict[str, Any]:
    return {
        "id": case.node_id,
        "family": case.family,
        "outcome": case.outcome.value,
        "message": case.message,
        "detail": case.detail,
        "properties": {
            name: value
            for name, value in case.properties.items()
            if name not in ("nodeid", "family", "backend")
        },
        "source": case.source,
    }


def _provenance(result: BackendResult) -> list[dict[str, Any]]:
    rows = []
    for run in result.input.runs:
        sidecar = run.sidecar or {}
        rows.append(
            {
                "file": str(run.path),
                "shard": None if run.shard is None else str(run.shard),
                "suite_name": run.suite_name,
                "sidecar": None if run.sidecar_path is None else str(run.sidecar_path),
                **{key: sidecar.get(key) for key in RUN_FACTS if key in sidecar},
            }
        )
    return rows


def _backend(result: BackendResult) -> dict[str, Any]:
    families: dict[str, dict[str, int]] = {}
    for family in sorted({case.family for case in result.cases}):
        families[family] = outcome_counts(case for case in result.cases if case.family == family)
    completeness = result.completeness
    backend_input = result.input
    headroom = headroom_rows(result.backend, result.cases)
    return {
        "backend": result.backend,
        "status": result.status.value,
        "required": result.required,
        "reason": result.reason,
        "code": result.code,
        "source": backend_input.source if backend_input.has_input else "none",
        "evidence": None
        if backend_input.source != "evidence"
        else {
            "date": backend_input.evidence_date,
            "path": str(backend_input.evidence_path),
            "commit": _evidence_commit(backend_input.evidence_facts),
            "dirty": evidence_dirty(backend_input.evidence_facts),
            "stale": backend_input.stale,
            "shadowed": backend_input.shadowed,
            "facts": backend_input.evidence_facts,
        },
        "counts": outcome_counts(result.cases),
        "families": families,
        "issues": result.issues,
        "issue_codes": [code_of(issue) for issue in result.issues],
        "warnings": result.warnings,
        "stale_expectations": result.stale_expectations,
        "expectation_files": result.expectation_files,
        "completeness": None
        if completeness is None
        else {
            "expected_source": completeness.expected_source,
            "expected_count": completeness.expected_count,
            "missing": {owner: len(ids) for owner, ids in completeness.missing.items()},
            "missing_ids": {
                owner: ids[:MAX_IDS_LISTED] for owner, ids in completeness.missing.items()
            },
            "duplicates": completeness.duplicates,
            "unexpected": completeness.unexpected[:MAX_IDS_LISTED],
        },
        "problems": []
        if result.status == Status.NOT_RUN
        else [_case(case) for case in result.cases if case.outcome in PROBLEM_OUTCOMES],
        "xfails": [_case(case) for case in result.cases if case.outcome == Outcome.XFAIL],
        "expected_skips": [
            _case(case) for case in result.cases if case.outcome == Outcome.EXPECTED_SKIP
        ],
        "provenance": _provenance(result),
        "not_applicable": [
            _case(case) for case in result.cases if case.outcome == Outcome.NOT_APPLICABLE
        ],
        "headroom": headroom[0],
        "headroom_missing": headroom[1],
    }


def _relative_to(path: Path, root: Path | None) -> str:
    """``path`` relative to ``root`` when it lies below it, else as given."""
    try:
        return path.resolve().relative_to((root or Path.cwd()).resolve()).as_posix()
    except ValueError:
        return str(path)


def _evidence_commit(facts: dict[str, Any] | None) -> str | None:
    facts = facts or {}
    fingerprint = facts.get("fingerprint")
    commit = fingerprint.get("commit") if isinstance(fingerprint, dict) else None
    return str(commit or facts.get("git_commit") or "") or None


def expected_outcomes(backends: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every expected skip and xfail of every backend: ``backend``, ``id``, ``outcome``,
    ``reason`` (the message, which names the expectation file and line) and ``source``."""
    return [
        {
            "backend": backend["backend"],
            "id": case["id"],
            "outcome": case["outcome"],
            "reason": case["message"],
            "source": case["source"],
        }
        for backend in backends
        for case in [*backend["expected_skips"], *backend["xfails"]]
    ]


def signoff_document(result: SignoffResult) -> dict[str, Any]:
    """The whole sign-off as a JSON-ready dict."""
    backends = [_backend(result.backends[name]) for name in backend_order(result.backends)]
    outcomes = {
        name: {case.node_id: case.outcome.value for case in result.backends[name].cases}
        for name in backend_order(result.backends)
        if result.backends[name].status != Status.NOT_RUN
    }
    document = {
        "format": DOCUMENT_FORMAT,
        "verdict": result.verdict.value,
        "exit_code": result.verdict.exit_code,
        "generated_at": result.generated_at,
        "reports_dir": _relative_to(result.reports_dir, result.root),
        "required": result.required,
        "required_source": result.required_source,
        "families": sorted({family for backend in backends for family in backend["families"]}),
        "release": result.release,
        "blocking": result.blocking,
        "blocking_codes": [code_of(line) for line in result.blocking],
        "expected_outcomes": expected_outcomes(backends),
        "errors": result.errors,
        "error_codes": [code_of(error) for error in result.errors],
        "warnings": result.warnings,
        "not_signed_off": [
            {
                "backend": b["backend"],
                "status": b["status"],
                "required": b["required"],
                "reason": b["reason"],
                "code": b["code"],
            }
            for b in backends
            if b["status"] not in SIGNED_OFF
        ],
        "baseline": None if result.baseline is None else compare(outcomes, result.baseline),
        "backends": backends,
        "outcomes": outcomes,
    }
    return relative_document(document, result.root)


def render_json(document: dict[str, Any]) -> str:
    """``signoff.json`` text."""
    return json.dumps(document, indent=2, sort_keys=False) + "\n"
