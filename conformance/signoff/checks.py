"""The sign-off's checks: code → the function that raises its issues → one line of doc.

A table of `conformance.rule_table.Rule`, like the plan invariants and the validator's rules.

Every issue the sign-off raises is an `Issue` carrying one of these codes, shown in
``signoff.md``/``.html`` as ``[SIGN007] ...`` and in ``signoff.json`` as the ``code`` of a
backend's reason and the ``issue_codes``, ``blocking_codes`` and ``error_codes`` beside the
lists they code. ``docs/signoff.md`` lists the same codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.rule_table import Rule
from conformance.signoff import (
    classify,
    collect,
    completeness,
    declared,
    discovery,
    engine,
    evidence,
    expectation_files,
    integrity,
    verdict,
)

CHECKS: Mapping[str, Rule[Any]] = {
    c.code: c
    for c in (
        Rule(
            "SIGN001",
            discovery.discover,
            (
                "a report file of the backend cannot be read (not XML, too large, a FIFO, another "
                "tool's, ...)"
            ),
        ),
        Rule(
            "SIGN002",
            integrity.integrity_issues,
            (
                "the claims of a backend's reports disagree (names, counts, sha256, device kind, "
                "collected ids, error figures)"
            ),
        ),
        Rule(
            "SIGN003",
            completeness.shard_layout,
            "a shard file is missing, or files of different runs are mixed",
        ),
        Rule(
            "SIGN004",
            completeness.run_documents,
            "a sidecar is missing, or describes an unfinished, filtered, partial or other run",
        ),
        Rule(
            "SIGN005",
            completeness.expected_ids,
            "the runs of one backend collected different test sets",
        ),
        Rule(
            "SIGN006",
            completeness.reported_ids,
            "a test id is reported by more than one file",
        ),
        Rule(
            "SIGN007",
            completeness.missing_ids,
            "a collected test id is not reported (named with the file that should have)",
        ),
        Rule(
            "SIGN008",
            completeness.unexpected_ids,
            "a reported test id was not collected, or nothing was collected",
        ),
        Rule(
            "SIGN009",
            classify.not_applicable_issues,
            (
                "a test is reported not applicable where the backend's declaration does not rule "
                "it out"
            ),
        ),
        Rule(
            "SIGN010",
            verdict.failed,
            "a test failed or errored",
        ),
        Rule(
            "SIGN011",
            verdict.stale,
            "evidence made from files that have changed since (or that records no hashes)",
        ),
        Rule(
            "SIGN012",
            verdict.unexplained,
            "a skip or xfail the expectation file does not list",
        ),
        Rule(
            "SIGN013",
            verdict.nothing_passed,
            "the reports hold no test, or not one passed",
        ),
        Rule(
            "SIGN014",
            verdict.numerics_never_ran,
            "golden decode comparisons were reported and none passed",
        ),
        Rule(
            "SIGN015",
            engine.blocking_reasons,
            "a required backend did not run",
        ),
        Rule(
            "SIGN016",
            discovery.discover,
            "a report file belongs to no known backend",
        ),
        Rule(
            "SIGN017",
            evidence.find_evidence,
            "an evidence directory cannot be used (a bad name or date)",
        ),
        Rule(
            "SIGN018",
            engine.expectations_of,
            "an expectation file cannot be read",
        ),
        Rule(
            "SIGN019",
            collect.collect_ids,
            "the expected ids could not be collected (`--collect`, `--release`)",
        ),
        Rule(
            "SIGN020",
            engine.judge,
            "a backend's reports could not be judged (an unforeseen error on hostile input)",
        ),
        Rule(
            "SIGN021",
            declared.declaration_issues,
            (
                "the runs recorded different declarations, or one other than the backend class "
                "declares here"
            ),
        ),
        Rule(
            "SIGN022",
            expectation_files.expectation_issues,
            (
                "a built-in backend ran with expectations other than the repository's committed "
                "file (the sha256 its sidecar records differs, or another file is named)"
            ),
        ),
    )
}
