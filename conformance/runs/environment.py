"""The environment variables a conformance run reads, each named once."""

from __future__ import annotations

from collections.abc import Mapping

BACKEND_VARIABLE = "MLA_CONFORMANCE_BACKEND"
"""The backend under test when ``--backend`` is not given."""
DEFAULT_BACKEND = "cpu"
GPU_COUNT_VARIABLE = "MLA_GPU_COUNT"
"""How many GPUs a GPU run spreads its xdist workers over (one worker per GPU)."""
GIT_COMMIT_VARIABLE = "MLA_CONFORMANCE_GIT_COMMIT"
"""The commit a run tests, for machines whose copy of the tree has no git metadata."""


def gpu_count(environ: Mapping[str, str]) -> int | None:
    """``MLA_GPU_COUNT`` as a number of GPUs (None when unset); `ValueError` names bad values."""
    text = environ.get(GPU_COUNT_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{GPU_COUNT_VARIABLE}={text!r}: expected a whole number of GPUs (>= 1)")
    return int(text)
