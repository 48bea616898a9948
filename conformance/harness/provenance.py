"""Moved to `conformance.runs.provenance`; these names stay here for one release."""

from __future__ import annotations

from conformance.runs.provenance import (
    GIT_COMMIT_ENV,
    TRACKED_PACKAGES,
    cpu_name,
    device_name,
    git_facts,
    gpu_name,
    package_versions,
    run_facts,
    torch_build,
)

__all__ = [
    "GIT_COMMIT_ENV",
    "TRACKED_PACKAGES",
    "cpu_name",
    "device_name",
    "git_facts",
    "gpu_name",
    "package_versions",
    "run_facts",
    "torch_build",
]
