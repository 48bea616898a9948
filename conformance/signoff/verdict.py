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
from collections.abc import Iterable, Mapping, Sequence

from conformance.applicability import Declaration
from conformance.harness.expectations import Expectation
from conformance.signoff.classify import (
    classify,
    not_applicable_issues,
    stale_expectations,
    unavailable_reason,
)
from conformance.signoff.completeness import check_completeness
from conformance.signoff.integrity import FIGURED_TEST, integrity_issues
from conformance.signoff.issue import code_of, coded
from conformance.signoff.model import (
    BackendInput,
    BackendResult,
    CaseResult,
    Outcome,
    Status,
    Verdict,
)


def outcome_counts(cases: Iterable[CaseResult]) -> dict[str, int]:
    """How many cases had each outcome (every outcome present, zeros included)."""
    counts = Counter(case.outcome for case in cases)
    return {outcome.value: counts.get(outcome, 0) for outcome in Outcome}


def _summary(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{number} {name}" for name, number in counts.items() if number)


def evaluate_backend(
    backend_input: BackendInput,
    *,
    required: bool,
    expectations: Sequence[Expectation],
    collected: Sequence[str] | None = None,
    availability_reason: str | None = None,
    expected_kind: str | None = None,
    declaration: Declaration | None = None,
) -> BackendResult:
    """Classify, check completeness and decide the status of one backend.

    ``declaration`` is what the backend declares: every not-applicable skip must follow
    from it (`conformance.applicability`).
    """
    backend = backend_input.backend
    if not backend_input.has_input:
        reason = availability_reason or "no reports found"
        return BackendResult(
            backend, Status.NOT_RUN, required, reason, backend_input, [], None, [], [], []
        )
    raw_cases = [case for run in backend_input.runs for case in run.cases]
    cases, warnings = classify(
        raw_cases, backend=backend, expectations=expectations, declaration=declaration
    )
    completeness = check_completeness(backend_input, collected=collected)
    integrity = integrity_issues(backend_input, expected_kind=expected_kind, collected=collected)
    issues: list[str] = [
        *coded("SIGN001", backend_input.problems),
        *coded("SIGN002", integrity),
        *completeness.issues,
        *not_applicable_issues(cases, backend),
    ]
    known_ids = {case.node_id for case in cases}
    if collected is not None:
        known_ids.update(collected)
    for run in backend_input.runs:
        if run.sidecar is not None:
            known_ids.update(run.sidecar.get("collected_ids") or ())
    stale = stale_expectations(expectations, known_ids) if known_ids else []
    counts = outcome_counts(cases)
    bad = counts[Outcome.FAILED.value] + counts[Outcome.ERROR.value]
    unexplained = counts[Outcome.SKIPPED.value] + counts[Outcome.UNAVAILABLE.value]
    code: str | None = None
    if cases and counts[Outcome.UNAVAILABLE.value] == len(cases) and not backend_input.problems:
        status = Status.NOT_RUN
        reason = unavailable_reason(backend, cases[0].message) or "backend unavailable"
    elif bad:
        status, reason, code = Status.FAIL, _summary(counts), "SIGN010"
    elif backend_input.stale and not backend_input.problems:  # re-make it: that fixes the rest
        status, reason, code = Status.STALE, stale_reason(backend_input), "SIGN011"
    elif issues:
        more = f" (+{len(issues) - 1} more)" if len(issues) > 1 else ""
        status, reason, code = Status.INCOMPLETE, issues[0] + more, code_of(issues[0])
    elif unexplained:
        status, code = Status.INCOMPLETE, "SIGN012"
        first = next(c for c in cases if c.outcome in (Outcome.SKIPPED, Outcome.UNAVAILABLE))
        reason = (
            f"{unexplained} unexplained skips or xfails (first: {first.node_id}: "
            f"{first.message[:200]}): fix them or list them with a reason in "
            f"conformance/expectations/{backend}.txt"
        )
    elif not cases:
        status, reason, code = Status.INCOMPLETE, "the reports hold no tests", "SIGN013"
    elif not counts[Outcome.PASSED.value]:
        status, reason = Status.INCOMPLETE, f"no test passed ({_summary(counts)})"
        code = "SIGN013"
    elif _numerics_never_ran(cases):
        status, code = Status.INCOMPLETE, "SIGN014"
        reason = (
            "the numerics contract did not run: no golden decode comparison passed "
            f"({_summary(outcome_counts(c for c in cases if f'::{FIGURED_TEST}' in c.node_id))}); "
            "check the backend's declared q_dtypes and kv_dtypes"
        )
    else:
        status, reason = Status.PASS, _summary(counts)
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
    )


def _numerics_never_ran(cases: Sequence[CaseResult]) -> bool:
    """Golden decode comparisons were reported, and not one passed (all not applicable, say)."""
    numerics = [case for case in cases if f"::{FIGURED_TEST}" in case.node_id]
    return bool(numerics) and not any(case.outcome is Outcome.PASSED for case in numerics)


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
