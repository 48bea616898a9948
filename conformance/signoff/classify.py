"""One outcome per test: JUnit's pass/fail/error/skip refined by the expectation file.

- ``<skipped type="pytest.xfail">`` is an xfail, never a skip; it is explained only by an
  ``xfail:`` entry (or the plugin's ``expected failure (...)`` prefix): a test that calls
  ``pytest.xfail()`` on its own is unexplained.
- A skip whose reason starts ``not applicable: `` (and gives one) is a test the backend's own
  declaration rules out: NOT APPLICABLE, neither passed nor blocking.
- A skip whose reason starts ``backend <name> unavailable:`` is the backend not running here.
- A skip is *expected* when the backend's expectation file lists it as ``skip:`` (or its reason
  carries the plugin's ``expected skip (...)`` prefix); any other skip is unexplained, and so is
  a skip with no reason (pytest's default ``Skipped`` / ``unconditional skip``).
- A failure the expectation file lists as ``xfail:`` counts as xfail (the run predates the
  entry); a pass it lists is reported so the entry can be removed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from conformance.runs.expectations import (
    EXPECTED_SKIP_PREFIX,
    EXPECTED_XFAIL_PREFIX,
    Expectation,
    match_expectation,
    stale_entries,
)
from conformance.signoff.model import CaseResult, Outcome

XPASS_STRICT_PREFIX = "[XPASS(strict)]"
NOT_APPLICABLE_PREFIX = "not applicable: "
EMPTY_REASONS: frozenset[str] = frozenset({"", "skipped", "unconditional skip"})


def _is_empty_reason(message: str) -> bool:
    return message.strip().lower().removeprefix("skipped:").strip() in EMPTY_REASONS


def _skip_outcome(message: str, backend: str, entry: Expectation | None) -> tuple[Outcome, str]:
    if _is_empty_reason(message):
        return Outcome.SKIPPED, f"skipped with no reason ({message.strip() or 'empty'!r})"
    if message.startswith(NOT_APPLICABLE_PREFIX) and message[len(NOT_APPLICABLE_PREFIX) :].strip():
        return Outcome.NOT_APPLICABLE, message
    if message.startswith(unavailable_prefix(backend)):
        return Outcome.UNAVAILABLE, message
    if message.startswith(EXPECTED_SKIP_PREFIX) or (entry is not None and entry.kind == "skip"):
        return Outcome.EXPECTED_SKIP, message
    return Outcome.SKIPPED, message


def unavailable_prefix(backend: str) -> str:
    """The skip-reason prefix of a backend that cannot run here."""
    return f"backend {backend} unavailable:"


def unavailable_reason(backend: str, message: str) -> str:
    """The reason part of an ``unavailable`` skip message."""
    return message.removeprefix(unavailable_prefix(backend)).strip()


def classify(
    cases: Sequence[CaseResult], *, backend: str, expectations: Sequence[Expectation]
) -> tuple[list[CaseResult], list[str]]:
    """Refine the outcomes of ``cases``; returns the new cases and warnings."""
    classified: list[CaseResult] = []
    warnings: list[str] = []
    for case in cases:
        entry = match_expectation(expectations, case.node_id)
        outcome, message = case.outcome, case.message
        if outcome == Outcome.SKIPPED:
            outcome, message = _skip_outcome(message, backend, entry)
        elif outcome == Outcome.XFAIL:
            if not message.startswith(EXPECTED_XFAIL_PREFIX) and (
                entry is None or entry.kind != "xfail"
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
