"""Evidence substitution: which backends are judged on evidence instead of local reports.

The newest readable evidence directory of a backend (`conformance.signoff.evidence`) stands in
for it when it has no reports of its own, or when every test of its local reports skipped (a
machine that cannot run it); its staleness is checked against the checkout.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conformance.signoff.evidence import evidence_staleness, find_evidence, load_evidence
from conformance.signoff.issue import Issue
from conformance.signoff.model import BackendInput, Outcome


@dataclass
class Substitution:
    """The inputs to judge, with what the evidence search found wrong or worth saying."""

    inputs: dict[str, BackendInput]
    errors: list[Issue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def substitute_evidence(
    local: Mapping[str, BackendInput],
    evidence_dir: Path | None,
    *,
    known_backends: Collection[str],
    root: Path,
    limit: int,
) -> Substitution:
    """``local`` with evidence standing in where it should (None: no evidence)."""
    inputs = dict(local)
    if evidence_dir is None:
        return Substitution(inputs)
    index = find_evidence(evidence_dir, known_backends=known_backends)
    warnings = [*index.warnings]
    warnings += [
        f"{old.path}: older than a newer evidence directory; not used" for old in index.older
    ]
    for backend, evidence in index.newest.items():
        own = inputs.get(backend)
        if own is not None and own.has_input and not all_skipped(own):
            warnings.append(f"{evidence.path}: not used, {backend} has reports of its own")
            continue
        loaded = load_evidence(evidence, known_backends=known_backends, limit=limit)
        loaded.stale = evidence_staleness(loaded, root=root)
        if own is not None and own.has_input:
            loaded.shadowed = [run.path.name for run in own.runs]
            warnings.append(
                f"{backend}: every test of the local {', '.join(loaded.shadowed)} was "
                f"skipped; the evidence of {evidence.date} stands in for it"
            )
        inputs[backend] = loaded
    return Substitution(inputs, index.errors, warnings)


def all_skipped(backend_input: BackendInput) -> bool:
    """A local report that ran nothing (every test skipped): it never shadows evidence."""
    cases = [case for run in backend_input.runs for case in run.cases]
    return (
        bool(cases)
        and not backend_input.problems
        and all(case.outcome == Outcome.SKIPPED for case in cases)
    )
