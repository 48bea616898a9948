"""Warnings about what a run recorded of itself: a dirty working tree, a GPU run with no GPU.

Neither blocks a PASS (committed evidence is reviewed like code), but a reader of the sign-off
must see them: results made from uncommitted changes are those of files no commit holds, and a
GPU run that names no GPU cannot say what it ran on.
"""

from __future__ import annotations

from typing import Any

from conformance.signoff.fingerprint import FINGERPRINT_KEY
from conformance.signoff.model import BackendInput
from conformance.targets import DEVICE_KINDS

DIRTY = "a working tree with uncommitted changes"


def evidence_dirty(facts: dict[str, Any] | None) -> bool:
    """Whether evidence's ``versions.json`` records a dirty tree (fingerprint or run)."""
    facts = facts or {}
    fingerprint = facts.get(FINGERPRINT_KEY)
    recorded = fingerprint.get("dirty") if isinstance(fingerprint, dict) else None
    return recorded is True or facts.get("git_dirty") is True


def provenance_warnings(backend_input: BackendInput) -> list[str]:
    """One line per dirty tree and per GPU run whose provenance names no GPU."""
    warnings = []
    if backend_input.source == "evidence" and evidence_dirty(backend_input.evidence_facts):
        warnings.append(
            f"evidence {backend_input.evidence_path} was made from {DIRTY}: its results are "
            "those of files no commit holds"
        )
    for run in backend_input.runs:
        sidecar = run.sidecar or {}
        if sidecar.get("git_dirty") is True:
            commit = sidecar.get("git_commit") or "an unknown commit"
            warnings.append(f"{run.path.name}: run made from {DIRTY} (at {commit})")
        kind = sidecar.get("device_kind")
        device = DEVICE_KINDS.get(kind) if isinstance(kind, str) else None
        if device is not None and device.is_gpu and not sidecar.get("gpus"):
            warnings.append(
                f"{run.path.name}: a {kind} run whose sidecar names no GPU in 'gpus' (device "
                f"{sidecar.get('device')!r}, devices {sidecar.get('devices') or []}): it cannot "
                "show which GPUs torch saw (a run made before 'gpus' was recorded has none)"
            )
    return warnings
