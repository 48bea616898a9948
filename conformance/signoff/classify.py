"""One outcome per test: JUnit's pass/fail/error/skip refined by the expectation file.

- ``<skipped type="pytest.xfail">`` is an xfail, never a skip.
- A skip whose reason starts ``backend <name> unavailable:`` is the backend not running here.
- A skip is *expected* when the backend's expectation file lists it as ``skip:`` (or its reason
  carries the plugin's ``expected skip (...)`` prefix); any other skip is unexplained.
- A failure the expectation file lists as ``xfail:`` counts as xfail (the run predates the
  entry); a pass it lists is reported so the entry can be removed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from conformance.harness.expectations import (
    EXPECTED_SKIP_PREFIX,
    Expectation,
    match_expectation,
    stale_entries,
)
from conformance.signoff.model import CaseResult, Outcome

XPASS_STRICT_PREFIX = "[XPASS(strict)]"


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
            if message.startswith(unavailable_prefix(backend)):
                outcome = Outcome.UNAVAILABLE
            elif message.startswith(EXPECTED_SKIP_PREFIX) or (
                entry is not None and entry.kind == "skip"
            ):
                outcome = Outcome.EXPECTED_SKIP
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
