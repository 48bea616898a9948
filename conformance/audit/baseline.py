"""Baselines: adopt the audit on an existing tree, fail only on new findings.

A baseline is a JSON file listing the fingerprints of the findings a tree had when it was
written (``--write-baseline FILE``). With ``--baseline FILE`` a finding is *known* when an
unused entry with its fingerprint remains: a fingerprint is the rule code, the file's path
relative to the baseline's folder, the enclosing scope and the names the finding is about,
so moving code within a file keeps it known, and a second identical finding in the same
scope is new.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Sequence

from conformance.audit.findings import Finding
from conformance.errors import ConformanceError

BASELINE_VERSION = 1


class BaselineError(ConformanceError, ValueError):
    """A baseline file that cannot be read; names the file."""


def fingerprint(finding: Finding, folder: str) -> str:
    """The finding's fingerprint as seen from the baseline's `folder`."""
    where = finding.file or finding.path
    relative = os.path.relpath(os.path.abspath(where), os.path.abspath(folder)).replace(os.sep, "/")
    key = "\0".join([finding.code, relative, finding.qualname, *finding.names])
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def write_baseline(path: str, findings: Sequence[Finding]) -> int:
    """Write `findings` as the baseline at `path` (atomically); returns how many."""
    folder = os.path.dirname(os.path.abspath(path))
    entries = sorted(
        (
            {
                "fingerprint": fingerprint(f, folder),
                "code": f.code,
                "path": f.path,
                "qualname": f.qualname,
            }
            for f in findings
        ),
        key=lambda e: (e["path"], e["code"], e["fingerprint"]),
    )
    document = {"version": BASELINE_VERSION, "tool": "mla-conformance audit", "findings": entries}
    fd, temp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
        handle.write("\n")
    os.replace(temp, path)
    return len(entries)


def load_baseline(path: str) -> Counter[str]:
    """The fingerprints of the baseline at `path`, with their counts."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise BaselineError(
            f"baseline {path}: no such file (write one with --write-baseline)"
        ) from None
    except (OSError, ValueError) as exc:
        raise BaselineError(f"baseline {path}: cannot read: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != BASELINE_VERSION:
        raise BaselineError(
            f"baseline {path}: expected a version {BASELINE_VERSION} baseline document"
        )
    entries = document.get("findings")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and "fingerprint" in e for e in entries
    ):
        raise BaselineError(
            f"baseline {path}: 'findings' must be a list of objects with a fingerprint"
        )
    return Counter(str(e["fingerprint"]) for e in entries)


def split_known(findings: Sequence[Finding], path: str) -> tuple[list[Finding], list[Finding]]:
    """(new, known) findings against the baseline at `path`."""
    remaining = load_baseline(path)
    folder = os.path.dirname(os.path.abspath(path))
    new: list[Finding] = []
    known: list[Finding] = []
    for finding in sorted(findings, key=lambda f: (f.path, f.line, f.col, f.code)):
        key = fingerprint(finding, folder)
        if remaining[key] > 0:
            remaining[key] -= 1
            known.append(finding)
        else:
            new.append(finding)
    return new, known
