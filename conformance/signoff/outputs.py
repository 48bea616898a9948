"""Moved to `conformance.runs.outputs`; these names stay here for one release."""

from __future__ import annotations

import warnings

from conformance.runs.outputs import (
    OUTPUT_NAMES,
    existing_outputs,
    move_outputs,
    output_paths,
    remove_outputs,
)

warnings.warn(
    "conformance.signoff.outputs moved to conformance.runs.outputs; "
    "the old path is removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["OUTPUT_NAMES", "existing_outputs", "move_outputs", "output_paths", "remove_outputs"]
