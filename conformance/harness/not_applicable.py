"""The harness's not-applicable skips: the only ones a conformance run reports as such.

At collection, every conformance test that `conformance.applicability.not_applicable` rules
out for the backend's declaration gets a skip mark with that reason; when it is reported it
carries the JUnit property ``not_applicable=suite``. A ``not applicable: ...`` skip raised
anywhere else (a test body, the backend's own code) is reported as an unexplained skip that
names the declaration it contradicts: a backend cannot opt out of cases it declares.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from typing import Any

import pytest

from conformance.applicability import (
    LSE_EXEMPTION,
    LSE_NOT_APPLICABLE,
    NOT_APPLICABLE,
    Declaration,
    lse_not_comparable,
    not_applicable,
)
from conformance.runs.skip_reasons import CLAIMED_ELSEWHERE as CLAIMED_ELSEWHERE  # re-exported
from conformance.runs.skip_reasons import claimed_elsewhere

SUITE_PROPERTY: tuple[str, str] = ("not_applicable", "suite")
"""The JUnit testcase property of a not-applicable skip the harness issued."""
REASON_KEY = pytest.StashKey[str]()
LSE_REASON_KEY = pytest.StashKey[str]()
DECLARATION_KEY = pytest.StashKey["Declaration | None"]()


def declaration_of(backend: str) -> Declaration | None:
    """The declaration of ``backend`` from the loaded registry (None when it cannot tell)."""
    registry = sys.modules.get("backends.registry")
    if registry is None:
        return None
    try:
        return Declaration.of(registry.get_backend(backend))
    except Exception:  # an unknown or broken backend: the plugin reports it
        return None


def recorded_declaration(backend: str) -> dict[str, Any] | None:
    """The declaration as the sidecar records it (None when the registry cannot tell)."""
    declaration = declaration_of(backend)
    return None if declaration is None else declaration.to_json()


def mark(item: pytest.Item, declaration: Declaration) -> None:
    """Skip ``item`` as not applicable when the declaration rules it out."""
    try:
        reason = not_applicable(declaration, item.nodeid)
    except LookupError:  # a case the table lacks: the test runs and says what is wrong
        return
    if reason is not None:
        item.add_marker(pytest.mark.skip(reason=reason))
        item.stash[REASON_KEY] = reason
        return
    lse = lse_not_comparable(declaration, item.nodeid)
    if lse is not None:  # the test runs; its LSE is not compared, and the report says why
        item.stash[LSE_REASON_KEY] = lse
        item.user_properties.append((LSE_NOT_APPLICABLE, lse))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Let the test's LSE go uncompared exactly where the suite derives it is not comparable."""
    token = LSE_EXEMPTION.set(item.stash.get(LSE_REASON_KEY, None))
    try:
        return (yield)
    finally:
        LSE_EXEMPTION.reset(token)


def skip_reason(report: pytest.TestReport) -> str | None:
    """The reason of a skipped report (None for other outcomes and xfails)."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Tag the harness's not-applicable skips; turn anyone else's into unexplained skips."""
    report = yield
    reason = skip_reason(report)
    conformance = item.get_closest_marker("family") is not None
    if not conformance or reason is None or not reason.startswith(NOT_APPLICABLE):
        return report
    if reason == item.stash.get(REASON_KEY, None):
        item.user_properties.append(SUITE_PROPERTY)
        return report
    declaration = item.config.stash.get(DECLARATION_KEY, None)
    declared = "unknown" if declaration is None else declaration.words()
    path, line, _ = report.longrepr  # type: ignore[misc]
    report.longrepr = (path, line, claimed_elsewhere(declared, reason.removeprefix(NOT_APPLICABLE)))
    return report
