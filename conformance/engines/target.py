"""An engine target as its session and its tests reach it (torch-free).

An engine's facts — its distribution, the release pinned by default and the releases its
driver supports, its Python, environment, what its session installs, its tests, the modules
that must import and the builders it must build — are its `EngineTarget` entry in
`conformance.targets.BUILTIN_TARGETS`. `engine_target` finds it by name; `nox -s <name>`
(driven by `conformance.ci.engine_session`) needs nothing else. A second engine is one more
entry there, its test package and driver module (docs/engines.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.target_types import EngineTarget
from conformance.targets import BUILTIN_TARGETS, engine_names


def engine_target(name: str) -> EngineTarget:
    """The engine target `name` of `BUILTIN_TARGETS`."""
    target = BUILTIN_TARGETS.get(name)
    if not isinstance(target, EngineTarget):
        raise KeyError(f"no engine target named {name!r} (known: {list(engine_names())})")
    return target


VLLM = engine_target("vllm")


def add_warning_filters(config: Any, target: EngineTarget) -> None:
    """Add `target`'s ``quiet_warnings`` to a pytest `config`'s ``filterwarnings``."""
    for entry in target.quiet_warnings:
        config.addinivalue_line("filterwarnings", entry)


KNOWN_FINDING = "known finding: "
"""The reason prefix of a known finding's strict xfail (`mark_known_findings`)."""


def finding_matches(nodeid: str, test: str) -> bool:
    """Whether a finding's test names `nodeid`: its end, or (a test ending in ``*``) every
    node id whose end starts with the rest (``test.py::test_x[TRITON_MLA-*``)."""
    if test.endswith("*"):
        stem = test[:-1]
        return f"/{stem}" in f"/{nodeid}" or nodeid.startswith(stem)
    return nodeid.endswith(test)


def mark_known_findings(items: list[Any], findings: Mapping[str, str]) -> list[str]:
    """Mark the engine tests of `findings` (matched by `finding_matches`) as strict xfails;
    returns the findings no collected test matched (stale entries)."""
    import pytest

    matched = set()
    for item in items:
        for test, reason in findings.items():
            if finding_matches(item.nodeid, test):
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"{KNOWN_FINDING}{reason}"))
                matched.add(test)
    return sorted(set(findings) - matched)


def declared_finding(target: str, version: str, nodeid: str, message: str) -> bool:
    """Whether `message` is the xfail reason of a finding that engine `target` declares for
    its release `version` on the test `nodeid` (what `mark_known_findings` wrote)."""
    if target not in engine_names():
        return False
    return any(
        message == f"{KNOWN_FINDING}{reason}" and finding_matches(nodeid, test)
        for test, reason in engine_target(target).known_findings(version).items()
    )
