"""Every check of the sign-off, declared once: its code and its one line of doc.

One `Check` per code, in code order, like ruff's rule registry (``codes.rs``): the module that
finds a problem raises it through the check (``MISSING_IDS.issue(message)``), so a code is
written here and nowhere else. ``signoff.md``/``.html`` show an issue as ``[SIGN007] ...``;
``signoff.json`` gives its code as the ``code`` of a backend's reason and in the
``issue_codes``, ``blocking_codes`` and ``error_codes`` beside the lists they code.
``docs/signoff.md`` ("Checks") lists `CHECKS`; a selftest holds the two together.
"""

from __future__ import annotations

from collections.abc import Mapping

from conformance.signoff.issue import Check

UNREADABLE_REPORT = Check(
    "SIGN001",
    "a report file of the backend cannot be read (not XML, too large, a FIFO, another tool's, ...)",
)
CLAIMS_DISAGREE = Check(
    "SIGN002",
    "the claims of a backend's reports disagree (names, counts, sha256, device kind, collected "
    "ids, error figures)",
)
SHARDS_MISSING_OR_MIXED = Check(
    "SIGN003", "a shard file is missing, or files of different runs are mixed"
)
SIDECAR_MISSING_OR_UNFIT = Check(
    "SIGN004",
    "a sidecar is missing, or describes an unfinished, filtered, partial or other run",
)
COLLECTIONS_DIFFER = Check("SIGN005", "the runs of one backend collected different test sets")
ID_REPORTED_TWICE = Check("SIGN006", "a test id is reported by more than one file")
ID_NOT_REPORTED = Check(
    "SIGN007", "a collected test id is not reported (named with the file that should have)"
)
ID_NOT_COLLECTED = Check(
    "SIGN008", "a reported test id was not collected, or nothing was collected"
)
UNDERIVED_NOT_APPLICABLE = Check(
    "SIGN009",
    "a test is reported not applicable where the backend's declaration does not rule it out",
)
TEST_FAILED = Check("SIGN010", "a test failed or errored")
STALE_EVIDENCE = Check(
    "SIGN011", "evidence made from files that have changed since (or that records no hashes)"
)
UNEXPLAINED_SKIP = Check("SIGN012", "a skip or xfail the expectation file does not list")
NOTHING_PASSED = Check("SIGN013", "the reports hold no test, or not one passed")
NUMERICS_NEVER_RAN = Check("SIGN014", "golden decode comparisons were reported and none passed")
REQUIRED_NOT_RUN = Check("SIGN015", "a required backend did not run")
UNKNOWN_BACKEND = Check("SIGN016", "a report file belongs to no known backend")
UNUSABLE_EVIDENCE_DIRECTORY = Check(
    "SIGN017", "an evidence directory cannot be used (a bad name or date)"
)
UNREADABLE_EXPECTATIONS = Check("SIGN018", "an expectation file cannot be read")
COLLECTION_FAILED = Check(
    "SIGN019", "the expected ids could not be collected (`--collect`, `--release`)"
)
UNJUDGEABLE_REPORTS = Check(
    "SIGN020",
    "a backend's reports could not be judged (an unforeseen error on hostile input)",
)
DECLARATION_CHANGED = Check(
    "SIGN021",
    "the runs recorded different declarations, or one other than the backend class declares here",
)
UNCOMMITTED_EXPECTATIONS = Check(
    "SIGN022",
    "a built-in backend ran with expectations other than the repository's committed file (the "
    "sha256 its sidecar records differs, or another file is named)",
)

CHECKS: Mapping[str, Check] = {
    check.code: check
    for check in (
        UNREADABLE_REPORT,
        CLAIMS_DISAGREE,
        SHARDS_MISSING_OR_MIXED,
        SIDECAR_MISSING_OR_UNFIT,
        COLLECTIONS_DIFFER,
        ID_REPORTED_TWICE,
        ID_NOT_REPORTED,
        ID_NOT_COLLECTED,
        UNDERIVED_NOT_APPLICABLE,
        TEST_FAILED,
        STALE_EVIDENCE,
        UNEXPLAINED_SKIP,
        NOTHING_PASSED,
        NUMERICS_NEVER_RAN,
        REQUIRED_NOT_RUN,
        UNKNOWN_BACKEND,
        UNUSABLE_EVIDENCE_DIRECTORY,
        UNREADABLE_EXPECTATIONS,
        COLLECTION_FAILED,
        UNJUDGEABLE_REPORTS,
        DECLARATION_CHANGED,
        UNCOMMITTED_EXPECTATIONS,
    )
}
"""Every check by its code, in code order."""
