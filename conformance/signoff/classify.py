"""One outcome per test: JUnit's pass/fail/error/skip refined by the expectation file.

- ``<skipped type="pytest.xfail">`` is an xfail, never a skip; it is explained only by an
  ``xfail:`` entry (or the plugin's ``expected failure (...)`` prefix): a test that calls
  ``pytest.xfail()`` on its own is unexplained.
- A skip whose reason starts ``not applicable: `` is a test the backend's own declaration
  rules out: NOT APPLICABLE, neither passed nor blocking, when the reason is exactly the one
  `conformance.applicability.not_applicable` derives from the declaration and the test id.
  Any other such claim (the backend opting out of a case it declares, a reason that
  contradicts the declaration, a declaration nobody can tell) is an unexplained skip that
  names the declaration; `not_applicable_issues` turns them into one issue (SIGN009). So is
  a claim the harness already reworded at run time (`conformance.runs.skip_reasons`).
- A test that ran with its LSE uncompared carries the property ``lse_not_applicable``; the
  reason must be exactly the one `conformance.applicability.lse_not_comparable` derives from
  the declared kernel table, else `lse_not_applicable_issues` blocks it (SIGN009 too).
- A skip whose reason starts ``backend <name> unavailable:`` is the backend not running here.
- A skip is *expected* when the backend's expectation file lists it as ``skip:`` (or its reason
  carries the plugin's ``expected skip (...)`` prefix); any other skip is unexplained, and so is
  a skip with no reason (pytest's default ``Skipped`` / ``unconditional skip``).
- An engine's strict xfail whose reason is a finding its target declares for the run's release
  (``known finding: ...``, `conformance.engines.target.declared_finding`) is explained there.
- A failure the expectation file lists as ``xfail:`` counts as xfail (the run predates the
  entry); a pass it lists is reported so the entry can be removed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from conformance.applicability import (
    LSE_NOT_APPLICABLE,
    NOT_APPLICABLE,
    Declaration,
    lse_not_comparable,
    not_applicable,
)
from conformance.runs.expectations import (
    EXPECTED_SKIP_PREFIX,
    EXPECTED_XFAIL_PREFIX,
    Expectation,
    match_expectation,
    stale_entries,
)
from conformance.runs.skip_reasons import parse_claimed_elsewhere
from conformance.signoff.checks import UNDERIVED_NOT_APPLICABLE
from conformance.signoff.issue import Issue
from conformance.signoff.model import CaseResult, Outcome

XPASS_STRICT_PREFIX = "[XPASS(strict)]"
UNDERIVED = "not applicable, but not by the declaration: "
"""How the message of a not-applicable claim the declaration does not support begins."""
EMPTY_REASONS: frozenset[str] = frozenset({"", "skipped", "unconditional skip"})


def _is_empty_reason(message: str) -> bool:
    return message.strip().lower().removeprefix("skipped:").strip() in EMPTY_REASONS


def _skip_outcome(
    case: CaseResult, backend: str, entry: Expectation | None, declaration: Declaration | None
) -> tuple[Outcome, str]:
    message = case.message
    if _is_empty_reason(message):
        return Outcome.SKIPPED, f"skipped with no reason ({message.strip() or 'empty'!r})"
    if message.startswith(NOT_APPLICABLE) and message[len(NOT_APPLICABLE) :].strip():
        return _not_applicable_outcome(case.node_id, message, backend, declaration)
    claim = parse_claimed_elsewhere(message)
    if claim is not None:  # the harness's words for a claim the suite did not make
        declared, reason = claim
        return Outcome.SKIPPED, (
            f"{UNDERIVED}the run skipped it as {NOT_APPLICABLE + reason!r} itself, but "
            f"{backend} declares {declared}: the test applies"
        )
    if message.startswith(unavailable_prefix(backend)):
        return Outcome.UNAVAILABLE, message
    if message.startswith(EXPECTED_SKIP_PREFIX) or (entry is not None and entry.kind == "skip"):
        return Outcome.EXPECTED_SKIP, message
    return Outcome.SKIPPED, message


def _not_applicable_outcome(
    node_id: str, message: str, backend: str, declaration: Declaration | None
) -> tuple[Outcome, str]:
    """NOT APPLICABLE when the declaration gives this very reason; else unexplained."""
    if declaration is None:
        return Outcome.SKIPPED, (
            f"{UNDERIVED}{backend}'s declaration is recorded in no sidecar and its class cannot "
            f"be loaded here, so {message!r} cannot be checked"
        )
    try:
        derived = not_applicable(declaration, node_id)
    except LookupError as error:
        return Outcome.SKIPPED, f"{UNDERIVED}{error}; the report says {message!r}"
    if derived == message:
        return Outcome.NOT_APPLICABLE, message
    verdict = f"the suite derives {derived!r}" if derived else "the test applies"
    return Outcome.SKIPPED, (
        f"{UNDERIVED}the report says {message!r}, but {backend} declares "
        f"{declaration.words()}: {verdict}"
    )


def not_applicable_issues(cases: Sequence[CaseResult], backend: str) -> list[Issue]:
    """One SIGN009 issue for the not-applicable claims the declaration does not support."""
    claims = [case for case in cases if case.message.startswith(UNDERIVED)]
    if not claims:
        return []
    first = claims[0]
    return [
        UNDERIVED_NOT_APPLICABLE.issue(
            f"{len(claims)} tests reported not applicable that {backend}'s declaration does not "
            f"rule out (first: {first.node_id}: {first.message.removeprefix(UNDERIVED)})",
        )
    ]


def lse_not_applicable_issues(
    cases: Sequence[CaseResult], backend: str, declaration: Declaration | None
) -> list[Issue]:
    """One SIGN009 issue for the LSE-not-comparable claims the declaration does not derive."""
    wrong = []
    for case in cases:
        claimed = case.properties.get(LSE_NOT_APPLICABLE)
        if claimed is None:
            continue
        try:
            derived = None if declaration is None else lse_not_comparable(declaration, case.node_id)
        except LookupError:
            derived = None
        if derived != claimed:
            wrong.append((case, claimed, derived))
    if not wrong:
        return []
    case, claimed, derived = wrong[0]
    verdict = f"the suite derives {derived!r}" if derived else "the suite derives no such reason"
    return [
        UNDERIVED_NOT_APPLICABLE.issue(
            f"{len(wrong)} tests of {backend} left their LSE uncompared where the declared "
            f"kernel table does not say so (first: {case.node_id}: the report says "
            f"{claimed!r}; {verdict})",
        )
    ]


def unavailable_prefix(backend: str) -> str:
    """The skip-reason prefix of a backend that cannot run here."""
    return f"backend {backend} unavailable:"


def unavailable_reason(backend: str, message: str) -> str:
    """The reason part of an ``unavailable`` skip message."""
    return message.removeprefix(unavailable_prefix(backend)).strip()


def classify(
    cases: Sequence[CaseResult],
    *,
    backend: str,
    expectations: Sequence[Expectation],
    declaration: Declaration | None = None,
    declared_finding: Callable[[CaseResult], bool] = lambda case: False,
) -> tuple[list[CaseResult], list[str]]:
    """Refine the outcomes of ``cases``; returns the new cases and warnings.

    ``declared_finding``: whether an xfail is a finding the engine target declares."""
    classified: list[CaseResult] = []
    warnings: list[str] = []
    for case in cases:
        entry = match_expectation(expectations, case.node_id)
        outcome, message = case.outcome, case.message
        if outcome == Outcome.SKIPPED:
            outcome, message = _skip_outcome(case, backend, entry, declaration)
        elif outcome == Outcome.XFAIL:
            if (
                not message.startswith(EXPECTED_XFAIL_PREFIX)
                and (entry is None or entry.kind != "xfail")
                and not declared_finding(case)
            ):
                outcome = Outcome.SKIPPED
                message = f"xfail with no expectation entry: {message or '(no reason)'}"
        elif (
            outcome == Outcome.FAILED
            and entry is not None
            and entry.kind == "xfail"
            and not message.startswith(XPASS_STRICT_PREFIX)
        ):
            outcome = Outcome.XFAIL
            message = f"{message} (expected by {entry.location}, applied at sign-off)"
        elif outcome == Outcome.PASSED and entry is not None and entry.kind == "xfail":
            warnings.append(
                f"{case.node_id} passed ({case.source}) but {entry.location} expects it to "
                "fail; remove the entry"
            )
        classified.append(dataclasses.replace(case, outcome=outcome, message=message))
    return classified, warnings


def stale_expectations(expectations: Sequence[Expectation], node_ids: Iterable[str]) -> list[str]:
    """``cpu.txt:3: <pattern>`` for every entry that matches none of ``node_ids``."""
    return [f"{entry.location}: {entry.pattern}" for entry in stale_entries(expectations, node_ids)]
