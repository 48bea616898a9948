"""Moved to `conformance.runs.names` (file names, shards) and `conformance.runs.shards` (which
tests belong to a shard); these names stay here for one release."""

from __future__ import annotations

import warnings

from conformance.runs.names import (
    PARTIAL_DIR,
    Shard,
    junit_name,
    parse_junit_name,
    parse_shard,
    partial_junit_path,
    sidecar_path,
)
from conformance.runs.shards import (
    DURATIONS_FILE,
    duration_algorithm,
    load_durations,
    select_for_shard,
    shard_index_of,
)

warnings.warn(
    "conformance.harness.sharding moved to conformance.runs.names / conformance.runs.shards; "
    "the old path is removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "DURATIONS_FILE",
    "PARTIAL_DIR",
    "Shard",
    "duration_algorithm",
    "junit_name",
    "load_durations",
    "parse_junit_name",
    "parse_shard",
    "partial_junit_path",
    "select_for_shard",
    "shard_index_of",
    "sidecar_path",
]
