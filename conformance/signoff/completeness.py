"""Did a backend report every test it should have run, each exactly once?

The expected ids come from the sidecars (pytest's own collection, recorded by the report
plugin) or, with ``--collect``, from a fresh ``pytest --collect-only``. A shard that crashed
or was deleted shows up as its missing file and the ids it should have reported; an id that
two files report is a duplicate; a run cut short (interrupted, filtered with ``-k``, never
finished) is named with the reason. One function per question, each raising the issues of
one sign-off check (SIGN003 to SIGN008, `conformance.signoff.checks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance.runs.names import (
    Shard,
    junit_name,
    junit_name_of_sidecar,
    parse_junit_name,
    sidecar_name,
)
from conformance.runs.shards import shard_index_of
from conformance.signoff.checks import (
    COLLECTIONS_DIFFER,
    ID_NOT_COLLECTED,
    ID_NOT_REPORTED,
    ID_REPORTED_TWICE,
    SHARDS_MISSING_OR_MIXED,
    SIDECAR_MISSING_OR_UNFIT,
)
from conformance.signoff.issue import Issue
from conformance.signoff.model import BackendInput, Completeness

ABNORMAL_EXIT: dict[int, str] = {2: "interrupted", 3: "internal error", 4: "usage error"}
MAX_IDS_IN_MESSAGE = 5


def _preview(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:MAX_IDS_IN_MESSAGE])
    more = len(ids) - MAX_IDS_IN_MESSAGE
    return shown + (f" and {more} more" if more > 0 else "")


def _sidecar_issues(file_name: str, document: dict[str, Any], *, shard: Shard | None) -> list[str]:
    issues = []
    expected_shard = None if shard is None else str(shard)
    if document.get("shard") != expected_shard:
        issues.append(
            f"{file_name}: its sidecar says shard {document.get('shard')!r}, "
            f"the file name says {expected_shard!r}"
        )
    if document.get("finished") is False:
        issues.append(
            f"{file_name}: the run that started at {document.get('started')} never finished "
            "(crashed or killed); this JUnit file is from an earlier run"
        )
    exitstatus = document.get("exitstatus")
    if isinstance(exitstatus, int) and exitstatus in ABNORMAL_EXIT:
        issues.append(
            f"{file_name}: the run ended with pytest exit status {exitstatus} "
            f"({ABNORMAL_EXIT[exitstatus]})"
        )
    filtered = document.get("filtered_out")
    if isinstance(filtered, int) and filtered > 0:
        issues.append(
            f"{file_name}: {filtered} tests were deselected (-k, -m or --deselect); "
            "a sign-off needs the full set"
        )
    if document.get("selection") == "partial":
        issues.append(
            f"{file_name}: the run selected part of the tests ({_selection_reason(document)}); "
            "a sign-off needs the full set"
        )
    return issues


def _selection_reason(document: dict[str, Any]) -> str:
    """The reason the harness gives for a partial selection, wherever it keeps it."""
    for key in ("selection_reason", "selection_reasons", "partial_reason", "selection_why"):
        value = document.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, list) and value:
            return "; ".join(str(item) for item in value)
    return "no reason recorded"


def check_completeness(
    backend_input: BackendInput, *, collected: Sequence[str] | None = None
) -> Completeness:
    """Compare what ``backend_input`` reported with what it should have run."""
    backend = backend_input.backend
    present, counts, layout_issues = shard_layout(backend_input)
    documents, sidecar_issues = run_documents(backend_input, collected=collected)
    expected, source, set_issues = expected_ids(documents, collected=collected)
    reporters, duplicates, duplicate_issues = reported_ids(backend_input)
    issues = [*layout_issues, *sidecar_issues, *set_issues, *duplicate_issues]
    missing: dict[str, list[str]] = {}
    unexpected: list[str] = []
    if expected is not None:
        count = counts[0] if len(counts) == 1 else None
        missing, missing_issues = missing_ids(
            backend_input, expected, reporters, documents, present=present, count=count
        )
        unexpected, unexpected_issues = unexpected_ids(backend, expected, reporters)
        issues += [*missing_issues, *unexpected_issues]
    return Completeness(
        expected_source=source,
        expected_count=0 if expected is None else len(expected),
        missing=missing,
        duplicates=duplicates,
        unexpected=unexpected,
        issues=issues,
    )


def shard_layout(
    backend_input: BackendInput,
) -> tuple[dict[str, Shard | None], list[int], list[Issue]]:
    """Which files should exist: the files present (name -> shard), the shard counts seen,
    and the files missing or mixed from different runs (SIGN003)."""
    backend = backend_input.backend
    issues: list[str] = []
    present: dict[str, Shard | None] = {}
    for run in backend_input.runs:
        present[run.path.name] = run.shard
    for path in backend_input.broken_files:
        present[path.name] = parse_junit_name(path.name)[1]
    for path in backend_input.orphan_sidecars:
        junit_file = junit_name_of_sidecar(path.name)
        present[junit_file] = parse_junit_name(junit_file)[1]
        issues.append(
            f"{junit_file} is missing but its sidecar {path.name} exists: the run crashed "
            "before pytest wrote its report, or the file was deleted"
        )
    shards = {shard for shard in present.values() if shard is not None}
    counts = sorted({shard.count for shard in shards})
    if shards and None in present.values():
        issues.append(
            f"both {junit_name(backend, None)} and sharded files are present: reports from "
            "different runs; clear reports/junit and run again"
        )
    if len(counts) > 1:
        issues.append(f"shard files split {counts} ways at once: reports from different runs")
    for count in counts:
        for index in range(1, count + 1):
            name = junit_name(backend, Shard(index, count))
            if name not in present:
                issues.append(
                    f"{name} is missing: shard {index}/{count} did not report "
                    "(crashed, not run, or deleted)"
                )
    return present, counts, SHARDS_MISSING_OR_MIXED.issues(issues)


def run_documents(
    backend_input: BackendInput, *, collected: Sequence[str] | None
) -> tuple[dict[str, dict[str, Any]], list[Issue]]:
    """The sidecars by JUnit file name, and whether each describes a finished, unfiltered run
    of its file (SIGN004)."""
    issues: list[str] = []
    documents: dict[str, dict[str, Any]] = {}
    for run in backend_input.runs:
        if run.sidecar is None:
            if collected is None:
                issues.append(
                    f"{run.path.name}: no readable sidecar "
                    f"{sidecar_name(run.path.name)}, so which tests it should "
                    "have run is unknown (run through the report plugin, or sign off with "
                    "--collect)"
                )
            continue
        documents[run.path.name] = run.sidecar
        issues.extend(_sidecar_issues(run.path.name, run.sidecar, shard=run.shard))
        junit_run_id = run.suite_properties.get("run_id")
        if junit_run_id and run.sidecar.get("run_id") and junit_run_id != run.sidecar["run_id"]:
            issues.append(
                f"{run.path.name}: JUnit and sidecar come from different runs "
                f"(run_id {junit_run_id} vs {run.sidecar['run_id']})"
            )
    for path, document in backend_input.orphan_documents.items():
        documents[junit_name_of_sidecar(path.name)] = document
    return documents, SIDECAR_MISSING_OR_UNFIT.issues(issues)


def expected_ids(
    documents: dict[str, dict[str, Any]], *, collected: Sequence[str] | None
) -> tuple[list[str] | None, str, list[Issue]]:
    """The ids the backend should have run, where they come from, and whether the runs
    collected the same set (SIGN005)."""
    if collected is not None:
        return list(collected), "collect", []
    sets = {
        name: tuple(document["collected_ids"])
        for name, document in documents.items()
        if document.get("collected_ids") is not None
    }
    if not sets:
        return None, "unknown", []
    issues: list[str] = []
    distinct = sorted(set(sets.values()), key=len)
    if len(distinct) > 1:
        sizes = ", ".join(f"{name}: {len(ids)}" for name, ids in sorted(sets.items()))
        issues.append(f"the runs collected different test sets ({sizes})")
    expected = list(dict.fromkeys(node_id for ids in distinct for node_id in ids))
    return expected, "sidecar", COLLECTIONS_DIFFER.issues(issues)


def reported_ids(
    backend_input: BackendInput,
) -> tuple[dict[str, list[str]], dict[str, list[str]], list[Issue]]:
    """What was reported and by which files; the ids reported more than once (SIGN006)."""
    reporters: dict[str, list[str]] = {}
    for run in backend_input.runs:
        for case in run.cases:
            reporters.setdefault(case.node_id, []).append(run.path.name)
    duplicates = {node_id: files for node_id, files in reporters.items() if len(files) > 1}
    issues = []
    if duplicates:
        issues.append(
            f"{len(duplicates)} ids reported more than once: "
            + _preview([f"{node_id} ({', '.join(files)})" for node_id, files in duplicates.items()])
        )
    return reporters, duplicates, ID_REPORTED_TWICE.issues(issues)


def missing_ids(
    backend_input: BackendInput,
    expected: Sequence[str],
    reporters: dict[str, list[str]],
    documents: dict[str, dict[str, Any]],
    *,
    present: dict[str, Shard | None],
    count: int | None,
) -> tuple[dict[str, list[str]], list[Issue]]:
    """Expected ids nobody reported, by the file that should have reported them (SIGN007)."""
    backend = backend_input.backend
    responsible: dict[str, str] = {}
    for name, document in documents.items():
        for node_id in document.get("selected_ids") or ():
            responsible.setdefault(node_id, name)
    missing: dict[str, list[str]] = {}
    for node_id in expected:
        if node_id in reporters:
            continue
        owner = responsible.get(node_id) or junit_name(
            backend, None if count is None else Shard(shard_index_of(node_id, count), count)
        )
        missing.setdefault(owner, []).append(node_id)
    ran = {run.path.name for run in backend_input.runs}
    broken = {path.name for path in backend_input.broken_files}
    issues = []
    for owner, ids in sorted(missing.items()):
        if owner in ran:
            state = "present"
        elif owner in broken:
            state = "unreadable"
        elif owner in present:
            state = "never written"
        else:
            state = "missing"
        issues.append(
            f"{len(ids)} expected ids not reported; {owner} ({state}) should have "
            f"reported them: {_preview(ids)}"
        )
    return missing, ID_NOT_REPORTED.issues(issues)


def unexpected_ids(
    backend: str, expected: Sequence[str], reporters: dict[str, list[str]]
) -> tuple[list[str], list[Issue]]:
    """Reported ids that were not collected, or nothing collected at all (SIGN008)."""
    expected_set = set(expected)
    unexpected = [node_id for node_id in reporters if node_id not in expected_set]
    issues = []
    if unexpected:
        issues.append(
            f"{len(unexpected)} reported ids were not collected for {backend}: "
            + _preview(unexpected)
        )
    if not expected and not reporters:
        issues.append(f"no tests were collected for {backend}")
    return unexpected, ID_NOT_COLLECTED.issues(issues)
