"""``reports/conformance.xml``: every backend's JUnit suites in one file, for CI tools.

Each suite is renamed ``mla-<backend>`` and stamped with the facts of its run (from the
sidecar, or the evidence ``versions.json``) as ``<testsuite>`` properties, since pytest cannot
record suite properties under xdist. Distinct properties keep junitparser from folding shards
into one suite. Problems the sign-off found (a missing shard, missing ids, a file it could
not read, a required backend that did not run or is stale) are added as ``<error>`` test
cases of a
``mla-signoff`` suite, so a tool that only reads this file still sees a non-passing result.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from xml.etree import ElementTree

from junitparser import Error, JUnitXml, Skipped, TestCase, TestSuite
from junitparser import junitparser as junitparser_module

from conformance.signoff.model import BackendResult, RunReport, Status

SIDECAR_FACTS: tuple[str, ...] = (
    "run_id",
    "started",
    "finished_at",
    "device",
    "python",
    "hostname",
    "git_commit",
    "torch_cuda",
    "torch_hip",
)
MAX_CASE_NAME = 120


def _as_junitparser(run: RunReport) -> JUnitXml:
    if junitparser_module.etree is ElementTree:
        return JUnitXml.fromroot(run.root)
    return JUnitXml.fromstring(ElementTree.tostring(run.root))  # junitparser runs on lxml


def run_facts(run: RunReport, result: BackendResult) -> dict[str, str]:
    """The suite properties of one run (empty values left out)."""
    facts: dict[str, Any] = {
        "backend": run.backend,
        "shard": "" if run.shard is None else str(run.shard),
        "source_file": run.path.name,
        "source": result.input.source,
        "evidence_date": result.input.evidence_date,
    }
    sidecar = run.sidecar or {}
    for key in SIDECAR_FACTS:
        facts[key] = sidecar.get(key)
    versions = sidecar.get("versions") or (result.input.evidence_facts or {}).get("versions")
    if isinstance(versions, Mapping):
        for name, version in versions.items():
            facts[f"{name}_version"] = version
    if result.input.evidence_facts:
        facts.setdefault("device", None)
        facts["device"] = facts["device"] or result.input.evidence_facts.get("device")
        facts["evidence_source"] = result.input.evidence_facts.get("source")
    return {name: str(value) for name, value in facts.items() if value not in (None, "")}


def _stamp(suite: TestSuite, facts: Mapping[str, str], backend: str) -> None:
    suite.name = f"mla-{backend}"
    existing = {prop.name for prop in suite.properties()}
    for name, value in facts.items():
        if name not in existing:
            suite.add_property(name, value)


def _problem_suite(name: str, problems: Iterable[tuple[str, str, bool]]) -> TestSuite:
    suite = TestSuite(name)
    for classname, message, is_error in problems:
        case = TestCase(name=message[:MAX_CASE_NAME], classname=classname, time=0.0)
        case.result = [Error(message, "signoff") if is_error else Skipped(message, "signoff")]
        suite.add_testcase(case)
    return suite


def merged_junit(results: Sequence[BackendResult], *, errors: Sequence[str]) -> bytes:
    """The merged JUnit document as UTF-8 bytes."""
    merged = JUnitXml("mla-conformance")
    problems: list[tuple[str, str, bool]] = []
    for result in results:
        for run in result.input.runs:
            facts = run_facts(run, result)
            for suite in _as_junitparser(run):
                _stamp(suite, facts, result.backend)
                merged.add_testsuite(suite)
        classname = f"signoff.{result.backend}"
        if result.status == Status.NOT_RUN:
            problems.append(
                (classname, f"{result.backend} not run: {result.reason}", result.required)
            )
        elif result.status == Status.STALE:
            problems.append(
                (classname, f"{result.backend} stale: {result.reason}", result.required)
            )
        elif result.status != Status.PASS:
            problems.extend((classname, issue, True) for issue in result.issues)
    problems.extend(("signoff", message, True) for message in errors)
    if problems:
        merged.add_testsuite(_problem_suite("mla-signoff", problems))
    merged.update_statistics()
    buffer = io.BytesIO()
    merged.write(buffer)
    return buffer.getvalue()
