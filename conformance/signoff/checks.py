"""The sign-off's checks: code → the function that raises its issues → one line of doc.

Every issue the sign-off raises is an `Issue` carrying one of these codes, shown in
``signoff.md``/``.html`` as ``[SIGN007] ...`` and in ``signoff.json`` as the ``code`` of a
backend's reason and the ``issue_codes``, ``blocking_codes`` and ``error_codes`` beside the
lists they code. ``docs/signoff.md`` lists the same codes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.signoff import (
    classify,
    collect,
    completeness,
    declared,
    discovery,
    engine,
    evidence,
    integrity,
    verdict,
)


@dataclass(frozen=True)
class Check:
    """One sign-off check: its code, the function that raises it, a one-line summary."""

    code: str
    check: Callable[..., Any]
    summary: str


CHECKS: Mapping[str, Check] = {
    c.code: c
    for c in (
        Check(
            "SIGN001",
            discovery.discover,
            (
                "a report file of the backend cannot be read (not XML, too large, a FIFO, another "
                "tool's, ...)"
            ),
        ),
        Check(
            "SIGN002",
            integrity.integrity_issues,
            (
                "the claims of a backend's reports disagree (names, counts, sha256, device kind, "
                "collected ids, error figures)"
            ),
        ),
        Check(
            "SIGN003",
            completeness.shard_layout,
            "a shard file is missing, or files of different runs are mixed",
        ),
        Check(
            "SIGN004",
            completeness.run_documents,
            "a sidecar is missing, or describes an unfinished, filtered, partial or other run",
        ),
        Check(
            "SIGN005",
            completeness.expected_ids,
            "the runs of one backend collected different test sets",
        ),
        Check(
            "SIGN006",
            completeness.reported_ids,
            "a test id is reported by more than one file",
        ),
        Check(
            "SIGN007",
            completeness.missing_ids,
            "a collected test id is not reported (named with the file that should have)",
        ),
        Check(
            "SIGN008",
            completeness.unexpected_ids,
            "a reported test id was not collected, or nothing was collected",
        ),
        Check(
            "SIGN009",
            classify.not_applicable_issues,
            (
                "a test is reported not applicable where the backend's declaration does not rule "
                "it out"
            ),
        ),
        Check(
            "SIGN010",
            verdict.failed,
            "a test failed or errored",
        ),
        Check(
            "SIGN011",
            verdict.stale,
            "evidence made from files that have changed since (or that records no hashes)",
        ),
        Check(
            "SIGN012",
            verdict.unexplained,
            "a skip or xfail the expectation file does not list",
        ),
        Check(
            "SIGN013",
            verdict.nothing_passed,
            "the reports hold no test, or not one passed",
        ),
        Check(
            "SIGN014",
            verdict.numerics_never_ran,
            "golden decode comparisons were reported and none passed",
        ),
        Check(
            "SIGN015",
            engine.blocking_reasons,
            "a required backend did not run",
        ),
        Check(
            "SIGN016",
            discovery.discover,
            "a report file belongs to no known backend",
        ),
        Check(
            "SIGN017",
            evidence.find_evidence,
            "an evidence directory cannot be used (a bad name or date)",
        ),
        Check(
            "SIGN018",
            engine.expectations_of,
            "an expectation file cannot be read",
        ),
        Check(
            "SIGN019",
            collect.collect_ids,
            "the expected ids could not be collected (`--collect`, `--release`)",
        ),
        Check(
            "SIGN020",
            engine.judge,
            "a backend's reports could not be judged (an unforeseen error on hostile input)",
        ),
        Check(
            "SIGN021",
            declared.declaration_issues,
            (
                "the runs recorded different declarations, or one other than the backend class "
                "declares here"
            ),
        ),
    )
}
