"""Moved to `conformance.runs.atomic`; these names stay here for one release."""

from __future__ import annotations

import warnings

from conformance.runs.atomic import atomic_write_bytes, atomic_write_text, current_umask

warnings.warn(
    "conformance.signoff.atomic moved to conformance.runs.atomic; "
    "the old path is removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["atomic_write_bytes", "atomic_write_text", "current_umask"]
