"""What a backend declares, as the sign-off knows it: recorded by its runs, or its class.

The harness records the declaration in each run's sidecar (``declaration``); where no run
recorded one (evidence made before it did), the backend class declares it where it loads.
Runs that recorded different declarations, or one other than the class's here, are an issue
(SIGN021): which cases are not applicable depends on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from conformance.applicability import Declaration
from conformance.signoff.checks import DECLARATION_CHANGED
from conformance.signoff.issue import Issue
from conformance.signoff.model import RunReport


def recorded_declarations(backend: str, runs: Sequence[RunReport]) -> dict[str, Declaration]:
    """The declaration each run's sidecar records, by JUnit file name."""
    recorded = {}
    for run in runs:
        declaration = Declaration.from_json(backend, (run.sidecar or {}).get("declaration"))
        if declaration is not None:
            recorded[run.path.name] = declaration
    return recorded


def declaration_of(
    backend: str, runs: Sequence[RunReport], registered: Declaration | None
) -> Declaration | None:
    """The first declaration a run recorded, else ``registered`` (the class, where it loads)."""
    recorded = recorded_declarations(backend, runs)
    return next(iter(recorded.values()), registered)


def declaration_issues(
    backend: str, runs: Sequence[RunReport], registered: Declaration | None
) -> list[Issue]:
    """Runs that disagree about the declaration, with each other or with the class (SIGN021)."""
    recorded = recorded_declarations(backend, runs)
    issues = []
    if len(set(recorded.values())) > 1:
        listed = "; ".join(f"{name}: {found.words()}" for name, found in recorded.items())
        issues.append(f"the runs of {backend} recorded different declarations ({listed})")
    elif recorded and registered is not None:
        name, found = next(iter(recorded.items()))
        if found != registered:
            issues.append(
                f"{name} records the declaration {found.words()}, but {backend} declares "
                f"{registered.words()} here"
            )
    return DECLARATION_CHANGED.issues(issues)
