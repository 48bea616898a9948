"""Moved to `conformance.runs.expectations`; these names stay here for one release."""

from __future__ import annotations

import warnings

from conformance.runs.expectations import (
    DEFAULT_EXPECTATIONS_DIR,
    EXPECTATION_KINDS,
    EXPECTED_SKIP_PREFIX,
    EXPECTED_XFAIL_PREFIX,
    Expectation,
    ExpectationFileError,
    ExpectationKind,
    expectations_path,
    id_matches,
    load_expectations,
    match_expectation,
    parse_expectations,
    stale_entries,
)

warnings.warn(
    "conformance.harness.expectations moved to conformance.runs.expectations; "
    "the old path is removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "DEFAULT_EXPECTATIONS_DIR",
    "EXPECTATION_KINDS",
    "EXPECTED_SKIP_PREFIX",
    "EXPECTED_XFAIL_PREFIX",
    "Expectation",
    "ExpectationFileError",
    "ExpectationKind",
    "expectations_path",
    "id_matches",
    "load_expectations",
    "match_expectation",
    "parse_expectations",
    "stale_entries",
]
