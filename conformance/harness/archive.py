"""Moved to `conformance.runs.archive`; these names stay here for one release."""

from __future__ import annotations

import warnings

from conformance.runs.archive import archive_superseded, superseded

warnings.warn(
    "conformance.harness.archive moved to conformance.runs.archive; "
    "the old path is removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["archive_superseded", "superseded"]
