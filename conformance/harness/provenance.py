"""Moved to `conformance.runs.provenance`; these names stay here for one release."""

from __future__ import annotations

import warnings

from conformance.runs.provenance import (
    GIT_COMMIT_ENV,
    TRACKED_PACKAGES,
    cpu_name,
    device_name,
    git_facts,
    gpu_name,
    gpu_names,
    package_versions,
    run_devices,
    run_facts,
    torch_build,
)

warnings.warn(
    "conformance.harness.provenance moved to conformance.runs.provenance; "
    "the old path is removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "GIT_COMMIT_ENV",
    "TRACKED_PACKAGES",
    "cpu_name",
    "device_name",
    "git_facts",
    "gpu_name",
    "gpu_names",
    "package_versions",
    "run_devices",
    "run_facts",
    "torch_build",
]
