"""The status of each backend and the overall verdict.

Backend status, first rule that applies:

1. ``NOT RUN``: no report at all, or every reported test skipped as ``backend <name>
   unavailable: <reason>`` (the reason is shown).
2. ``FAIL``: a test failed or errored (an xfail entry's unexpected pass is a failure too).
3. ``STALE``: readable evidence (a run made elsewhere) made from files that have changed
   since, or that records no file hashes; its other disagreements are listed with it.
4. ``INCOMPLETE``: a file is unreadable or missing, the claims of its reports disagree
   (`conformance.signoff.integrity`), ids are missing or duplicated, the run was cut short or
   partly selected, a test is reported not applicable where the backend's declaration does
   not rule it out, a skip or xfail is not explained by the expectation file, or no test
   passed.
5. ``PASS``. NOT APPLICABLE tests (``not applicable: <why>``, exactly as
   `conformance.applicability` derives it from the declaration) count neither way.

Each reason carries the code of the sign-off check behind it (`conformance.signoff.checks`).

Verdict: ``FAIL`` if any backend failed; else ``INCOMPLETE`` if any backend is incomplete, a
required backend did not run or is stale, or a file belongs to no known backend; else ``PASS``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.applicability import Declaration
from conformance.engines.target import declared_finding
from conformance.runs.expectations import Expectation
from conformance.signoff.checks import (
    NOTHING_PASSED,
    NUMERICS_NEVER_RAN,
    STALE_EVIDENCE,
    TEST_FAILED,
    UNEXPLAINED_SKIP,
    UNREADABLE_REPORT,
)
from conformance.signoff.classify import (
    classify,
    lse_not_applicable_issues,
    not_applicable_issues,
    stale_expectations,
    unavailable_reason,
)
from conformance.signoff.completeness import check_completeness
from conformance.signoff.declared import declaration_issues, declaration_of
from conformance.signoff.expectation_files import expectation_issues, used_files
from conformance.signoff.integrity import FIGURED_TEST, integrity_issues
from conformance.signoff.issue import Issue, code_of
from conformance.signoff.model import (
    BackendInput,
    BackendResult,
    CaseResult,
    Outcome,
    RunReport,
    Status,
    Verdict,
)


def outcome_counts(cases: Iterable[CaseResult]) -> dict[str, int]:
    """How many cases had each outcome (every outcome present, zeros included)."""
    counts = Counter(case.outcome for case in cases)
    return {outcome.value: counts.get(outcome, 0) for outcome in Outcome}


def _summary(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{number} {name}" for name, number in counts.items() if number)


def engine_findings(backend: str, runs: Sequence[RunReport]) -> Callable[[CaseResult], bool]:
    """Whether a case is a finding engine `backend` declares for its run's release (the
    version its sidecar names); never for a backend that is no engine."""
    versions = {
        run.path.name: str(engine.get("version"))
        for run in runs
        if isinstance(engine := (run.sidecar or {}).get("engine"), dict)
    }

    def declared(case: CaseResult) -> bool:
        version = versions.get(case.source)
        return version is not None and declared_finding(
            backend, version, case.node_id, case.message
        )

    return declared


def evaluate_backend(
    backend_input: BackendInput,
    *,
    required: bool,
    expectations: Sequence[Expectation],
    collected: Sequence[str] | None = None,
    availability_reason: str | None = None,
    expected_kind: str | None = None,
    declaration: Declaration | None = None,
    repository_expectations: Path | None = None,
) -> BackendResult:
    """Classify, check completeness and decide the status of one backend.

    ``declaration`` is what the backend class declares here (None: it cannot be loaded); the
    runs' recorded declaration comes first (`conformance.signoff.declared`), and every
    not-applicable skip must follow from it (`conformance.applicability`).
    ``repository_expectations`` is the committed expectation file a built-in target's runs must
    have used (`conformance.signoff.expectation_files`); None for a plug-in, which brings its own.
    """
    backend = backend_input.backend
    if not backend_input.has_input:
        reason = availability_reason or "no reports found"
        return BackendResult(
            backend, Status.NOT_RUN, required, reason, backend_input, [], None, [], [], []
        )
    raw_cases = [case for run in backend_input.runs for case in run.cases]
    declared = declaration_of(backend, backend_input.runs, declaration)
    cases, warnings = classify(
        raw_cases,
        backend=backend,
        expectations=expectations,
        declaration=declared,
        declared_finding=engine_findings(backend, backend_input.runs),
    )
    completeness = check_completeness(backend_input, collected=collected)
    integrity = integrity_issues(backend_input, expected_kind=expected_kind, collected=collected)
    files = used_files(backend_input.runs, repository_expectations)
    refused, unchecked = expectation_issues(backend, files, repository_expectations)
    warnings += unchecked
    issues: list[str] = [
        *UNREADABLE_REPORT.issues(backend_input.problems),
        *integrity,
        *completeness.issues,
        *declaration_issues(backend, backend_input.runs, declaration),
        *refused,
        *not_applicable_issues(cases, backend),
        *lse_not_applicable_issues(cases, backend, declared),
    ]
    known_ids = {case.node_id for case in cases}
    if collected is not None:
        known_ids.update(collected)
    for run in backend_input.runs:
        if run.sidecar is not None:
            known_ids.update(run.sidecar.get("collected_ids") or ())
    stale = stale_expectations(expectations, known_ids) if known_ids else []
    judged = Judged(backend_input, cases, outcome_counts(cases), issues)
    code: str | None = None
    if cases and judged.count(Outcome.UNAVAILABLE) == len(cases) and not backend_input.problems:
        status = Status.NOT_RUN
        reason = unavailable_reason(backend, cases[0].message) or "backend unavailable"
    else:
        status, reason = Status.PASS, _summary(judged.counts)
        for check, check_status in STATUS_CHECKS:
            found = check(judged)
            if found is not None:
                status, reason, code = check_status, found, code_of(found)
                break
    if backend_input.stale and status != Status.STALE:
        warnings.append(stale_reason(backend_input))
    return BackendResult(
        backend,
        status,
        required,
        reason,
        backend_input,
        cases,
        completeness,
        issues,
        warnings,
        stale,
        code=code,
        expectation_files=files,
    )


@dataclass
class Judged:
    """What the status checks of one backend read."""

    input: BackendInput
    cases: list[CaseResult]
    counts: dict[str, int]
    issues: list[str]  # coded: unreadable files, integrity, completeness, not applicable

    def count(self, *outcomes: Outcome) -> int:
        """How many cases had one of ``outcomes``."""
        return sum(self.counts[outcome.value] for outcome in outcomes)


def failed(judged: Judged) -> Issue | None:
    """A test failed or errored (SIGN010)."""
    if judged.count(Outcome.FAILED, Outcome.ERROR):
        return TEST_FAILED.issue(_summary(judged.counts))
    return None


def stale(judged: Judged) -> Issue | None:
    """The evidence was made from files that have changed since (SIGN011)."""
    if judged.input.stale and not judged.input.problems:  # re-make it: that fixes the rest
        return STALE_EVIDENCE.issue(stale_reason(judged.input))
    return None


def first_issue(judged: Judged) -> Issue | None:
    """The first coded issue, counting the others (the issue's own code)."""
    if not judged.issues:
        return None
    first, more = judged.issues[0], len(judged.issues) - 1
    return Issue(
        code_of(first) or UNREADABLE_REPORT.code, first + (f" (+{more} more)" if more else "")
    )


def unexplained(judged: Judged) -> Issue | None:
    """A skip or xfail nothing explains (SIGN012)."""
    count = judged.count(Outcome.SKIPPED, Outcome.UNAVAILABLE)
    if not count:
        return None
    first = next(c for c in judged.cases if c.outcome in (Outcome.SKIPPED, Outcome.UNAVAILABLE))
    return UNEXPLAINED_SKIP.issue(
        f"{count} unexplained skips or xfails (first: {first.node_id}: "
        f"{clipped(first.message, MAX_FIRST_MESSAGE)}): fix them or list them with a reason in "
        f"conformance/expectations/{judged.input.backend}.txt",
    )


MAX_FIRST_MESSAGE = 300
"""How much of the first unexplained skip's message a reason quotes."""


def clipped(text: str, limit: int) -> str:
    """``text`` on one line, cut at the last word boundary within ``limit`` characters (``…``)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(" ,;:(") + " …"


def nothing_passed(judged: Judged) -> Issue | None:
    """The reports hold no tests, or not one passed (SIGN013)."""
    if not judged.cases:
        return NOTHING_PASSED.issue("the reports hold no tests")
    if not judged.count(Outcome.PASSED):
        return NOTHING_PASSED.issue(f"no test passed ({_summary(judged.counts)})")
    return None


def numerics_never_ran(judged: Judged) -> Issue | None:
    """Golden decode comparisons were reported and not one passed (SIGN014)."""
    numerics = [case for case in judged.cases if f"::{FIGURED_TEST}" in case.node_id]
    if not numerics or any(case.outcome is Outcome.PASSED for case in numerics):
        return None
    return NUMERICS_NEVER_RAN.issue(
        "the numerics contract did not run: no golden decode comparison passed "
        f"({_summary(outcome_counts(numerics))}); check the backend's declared q_dtypes and "
        "kv_dtypes",
    )


STATUS_CHECKS: tuple[tuple[Callable[[Judged], Issue | None], Status], ...] = (
    (failed, Status.FAIL),
    (stale, Status.STALE),
    (first_issue, Status.INCOMPLETE),
    (unexplained, Status.INCOMPLETE),
    (nothing_passed, Status.INCOMPLETE),
    (numerics_never_ran, Status.INCOMPLETE),
)
"""A backend's status: the first check that finds something, in this order (else PASS)."""


def stale_reason(backend_input: BackendInput) -> str:
    """``evidence of <date> (commit <c>) is stale: <changes>``."""
    fingerprint = (backend_input.evidence_facts or {}).get("fingerprint") or {}
    commit = fingerprint.get("commit") or (backend_input.evidence_facts or {}).get("git_commit")
    for run in backend_input.runs:
        commit = commit or (run.sidecar or {}).get("git_commit")
    changes = backend_input.stale
    listed = "; ".join(changes[:6]) + (f" and {len(changes) - 6} more" if len(changes) > 6 else "")
    return (
        f"evidence of {backend_input.evidence_date} (commit {str(commit or 'unknown')[:12]}) is "
        f"stale: {listed}; re-make it at this commit"
    )


def overall_verdict(backends: Iterable[BackendResult], errors: Sequence[str]) -> Verdict:
    """Combine the backend statuses and the unattributable errors into the verdict."""
    results = list(backends)
    if any(result.status == Status.FAIL for result in results):
        return Verdict.FAIL
    if errors or any(
        result.status == Status.INCOMPLETE or (result.required and result.status != Status.PASS)
        for result in results
    ):
        return Verdict.INCOMPLETE
    return Verdict.PASS
