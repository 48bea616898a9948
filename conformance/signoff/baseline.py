"""``--baseline signoff.json``: what changed since an earlier sign-off.

Per backend: tests newly failing (failed or errored now, not before), newly passing (passed now,
not before), added (reported now, absent before) and removed (reported before, absent now).
The earlier sign-off must carry per-test outcomes (``signoff.json`` format ``mla-signoff/2``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conformance.signoff.errors import SignoffInputError
from conformance.signoff.loading import load_json_object

BAD = frozenset({"failed", "error"})
MAX_LISTED = 200


def load_baseline(path: Path) -> dict[str, Any]:
    """The parts of an earlier ``signoff.json`` a comparison needs; the error names the file."""
    document = load_json_object(path)
    outcomes = document.get("outcomes")
    if not isinstance(outcomes, dict) or not all(
        isinstance(ids, dict) and all(isinstance(value, str) for value in ids.values())
        for ids in outcomes.values()
    ):
        raise SignoffInputError(
            path,
            "has no per-test 'outcomes' (not a signoff.json, or one written before sign-offs "
            "recorded them)",
        )
    return {
        "file": path.name,
        "generated_at": str(document.get("generated_at") or "unknown"),
        "verdict": str(document.get("verdict") or "unknown"),
        "outcomes": outcomes,
    }


def _listed(ids: list[str]) -> dict[str, Any]:
    return {"count": len(ids), "ids": sorted(ids)[:MAX_LISTED]}


def compare(
    current: Mapping[str, Mapping[str, str]], baseline: Mapping[str, Any]
) -> dict[str, Any]:
    """The changes from ``baseline`` to ``current`` (``{backend: {id: outcome}}`` each)."""
    before_all: Mapping[str, Mapping[str, str]] = baseline["outcomes"]
    backends: dict[str, dict[str, Any]] = {}
    for backend in sorted(set(current) | set(before_all)):
        now, before = current.get(backend, {}), before_all.get(backend, {})
        common = set(now) & set(before)
        changes = {
            "newly_failing": _listed([i for i in common if now[i] in BAD and before[i] not in BAD]),
            "newly_passing": _listed(
                [i for i in common if now[i] == "passed" and before[i] != "passed"]
            ),
            "added": _listed([i for i in now if i not in before]),
            "removed": _listed([i for i in before if i not in now]),
        }
        if any(change["count"] for change in changes.values()):
            backends[backend] = changes
    return {
        "file": baseline["file"],
        "generated_at": baseline["generated_at"],
        "verdict": baseline["verdict"],
        "backends": backends,
    }
