"""The sidecar of a run's JUnit file: where it lives, the facts it records, and its writes.

A sidecar is a JSON object (``format``: ``mla-conformance-run/<n>``) beside the JUnit file
(`conformance.runs.names.sidecar_path`), a `conformance.runs.record.RunRecord` as JSON. The
pytest plugin writes it atomically and then seals it with the sha256 of the finished JUnit
file; the engine session writes it once, sealed; the sign-off reads it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conformance.runs.atomic import atomic_write_text
from conformance.runs.names import sidecar_path
from conformance.runs.record import RunRecord

MACHINE_FACTS: tuple[str, ...] = tuple(
    "device device_kind devices gpus versions torch_cuda torch_hip python platform hostname "
    "git_commit git_dirty".split()
)
"""The sidecar facts that describe the machine and software of a run."""


def write_sidecar(junit_path: Path, record: RunRecord) -> None:
    """Write ``record`` atomically as the sidecar of ``junit_path``."""
    junit_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(sidecar_path(junit_path), json.dumps(record.to_json(), indent=2) + "\n")


def seal_sidecar(junit_path: Path, run_id: str) -> None:
    """Add the sha256 of the finished JUnit file to its sidecar, if both exist and the sidecar
    is this run's (``run_id``)."""
    companion = sidecar_path(junit_path)
    try:
        document = json.loads(companion.read_text(encoding="utf-8"))
        data = junit_path.read_bytes()
    except (OSError, ValueError):
        return  # no JUnit file (or sidecar) to seal; the sign-off names what is missing
    if not isinstance(document, dict) or document.get("run_id") != run_id:
        return
    document["junit_sha256"] = hashlib.sha256(data).hexdigest()
    atomic_write_text(companion, json.dumps(document, indent=2) + "\n")
