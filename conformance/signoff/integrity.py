"""Does every claim a report makes agree with every other? Each disagreement names both values.

A JUnit file's claims: its file name (the backend, the shard), its suite name ``mla-<backend>``
and suite properties (``backend``, ``shard``, ``run_id``), each testcase's ``backend``
property, its ``tests`` count. Its sidecar's claims: the backend, the JUnit file name, the
sha256 of the JUnit file, the device kind of the run (``device_kind``, or for older sidecars
what the device and torch build imply), the ids it collected. What the backend declares: its
device kind (`conformance.targets.device_of`); what it collects here (``--collect``, the
default for a release sign-off). Any disagreement makes the backend INCOMPLETE.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.signoff.checks import CLAIMS_DISAGREE
from conformance.signoff.issue import Issue
from conformance.signoff.model import BackendInput, Outcome, RunReport
from conformance.targets import DEVICE_KINDS

MAX_SHOWN = 3
RAN: frozenset[Outcome] = frozenset({Outcome.PASSED, Outcome.FAILED, Outcome.XFAIL})


def _short(values: Sequence[str]) -> str:
    shown = ", ".join(values[:MAX_SHOWN])
    return shown + (f" and {len(values) - MAX_SHOWN} more" if len(values) > MAX_SHOWN else "")


def claimed_device_kind(facts: Mapping[str, Any]) -> tuple[str, str]:
    """The kind of device a run's provenance shows (cpu, cuda, rocm or none), and the facts."""
    explicit = facts.get("device_kind")
    if isinstance(explicit, str) and explicit:
        return explicit, f"its sidecar records device_kind {explicit!r}"
    versions = facts.get("versions")
    torch = versions.get("torch") if isinstance(versions, Mapping) else None
    hip, cuda, device = facts.get("torch_hip"), facts.get("torch_cuda"), facts.get("device")
    described = f"device {device!r}, torch {torch}, torch_cuda {cuda}, torch_hip {hip}"
    if facts.get("available") is False:
        return "none", f"the backend was unavailable ({described})"
    if hip and device:
        return "rocm", described
    if cuda and device and not str(torch or "").endswith("+cpu"):
        return "cuda", described
    return "cpu", described


def device_kind_issue(
    file_name: str, facts: Mapping[str, Any], *, backend: str, expected: str | None
) -> str | None:
    """Why a run's device does not fit the backend's declared kind (None when it does)."""
    if not expected:
        return None
    kind, described = claimed_device_kind(facts)
    explicit = isinstance(facts.get("device_kind"), str) and bool(facts.get("device_kind"))
    declared = DEVICE_KINDS.get(expected)
    on_gpu = declared is not None and declared.is_gpu
    if kind == expected or (not on_gpu and not explicit):
        return None
    return (
        f"{file_name}: backend {backend} runs on a {expected} device, but the run's "
        f"provenance shows {kind} ({described})"
    )


def _suite_issues(run: RunReport, backend: str) -> list[str]:
    issues = []
    expected_name = f"mla-{backend}"
    suites = [run.root] if run.root.tag == "testsuite" else list(run.root.iter("testsuite"))
    names = sorted({str(suite.get("name")) for suite in suites})
    wrong = [name for name in names if name != expected_name]
    if not suites:
        issues.append(f"{run.path.name}: holds no <testsuite>")
    elif wrong:
        issues.append(
            f"{run.path.name}: JUnit suite named {_short(wrong)}, the file name says "
            f"{expected_name!r} (a report of another backend or another tool?)"
        )
    claimed = run.suite_properties.get("backend")
    if claimed is not None and claimed != backend:
        issues.append(
            f"{run.path.name}: suite property backend={claimed!r}, the file name says {backend!r}"
        )
    shard_property = run.suite_properties.get("shard")
    file_shard = "" if run.shard is None else str(run.shard)
    if shard_property is not None and shard_property != file_shard:
        issues.append(
            f"{run.path.name}: suite property shard={shard_property!r}, the file name says "
            f"{file_shard!r}"
        )
    case_backends = Counter(
        case.properties["backend"]
        for case in run.cases
        if case.properties.get("backend") not in (None, backend)
    )
    for other, count in sorted(case_backends.items()):
        issues.append(
            f"{run.path.name}: {count} testcases carry property backend={other!r}, the file "
            f"name says {backend!r}"
        )
    if run.declared_tests is not None and run.declared_tests != len(run.cases):
        issues.append(
            f"{run.path.name}: its suites declare tests={run.declared_tests} but hold "
            f"{len(run.cases)} distinct test ids"
        )
    duplicated = [case.node_id for case in run.cases if case.duplicated]
    if duplicated:
        issues.append(
            f"{run.path.name}: {len(duplicated)} ids appear more than once in the file "
            f"(not pytest's failure-plus-teardown pair): {_short(duplicated)}"
        )
    return issues


def _sidecar_claims(run: RunReport, backend: str) -> list[str]:
    sidecar = run.sidecar or {}
    name = run.path.name
    issues = []
    claimed_backend = sidecar.get("backend")
    if claimed_backend is not None and claimed_backend != backend:
        issues.append(
            f"{name}: its sidecar says backend {claimed_backend!r}, the file name says {backend!r}"
        )
    junit = sidecar.get("junit")
    if junit is not None and junit != name:
        issues.append(f"{name}: its sidecar was written for JUnit file {junit!r}, not {name!r}")
    recorded = sidecar.get("junit_sha256")
    if not isinstance(recorded, str) or not recorded:
        issues.append(
            f"{name}: its sidecar records no junit_sha256, so the file cannot be shown to be "
            "the one that run wrote (an older plugin, or the run stopped before pytest wrote it)"
        )
    elif recorded != run.sha256:
        issues.append(
            f"{name}: sha256 {run.sha256[:12]}… but its sidecar records {recorded[:12]}… "
            "(the file was edited or replaced after the run)"
        )
    return issues


# Every passed golden decode comparison records its error figures as testcase properties.
FIGURED_TEST = "test_decode_matches_golden"
FIGURE_PROPERTY = "out_max_abs_err"


def _figure_issues(run: RunReport) -> list[str]:
    """Passed decode comparisons without their error figures: not what the harness writes."""
    bare = [
        case.node_id
        for case in run.cases
        if case.outcome is Outcome.PASSED
        and f"::{FIGURED_TEST}" in case.node_id
        and FIGURE_PROPERTY not in case.properties
    ]
    if not bare:
        return []
    return [
        f"{run.path.name}: {len(bare)} passed numerics case(s) carry no error figures "
        f"({FIGURE_PROPERTY}), which every real comparison records (e.g. {bare[0]})"
    ]


def integrity_issues(
    backend_input: BackendInput,
    *,
    expected_kind: str | None,
    collected: Sequence[str] | None = None,
) -> list[Issue]:
    """Every disagreement between the claims of ``backend_input``'s reports (SIGN002)."""
    backend = backend_input.backend
    issues: list[str] = []
    for run in backend_input.runs:
        issues += _suite_issues(run, backend)
        if run.sidecar is None:
            if collected is not None:  # else completeness names the missing sidecar
                issues.append(
                    f"{run.path.name}: no readable sidecar, so its provenance and sha256 "
                    "cannot be checked"
                )
            continue
        claims = _sidecar_claims(run, backend)
        if backend_input.source == "evidence" and backend_input.stale:
            # evidence from before files were hashed is STALE already: re-making it is the fix
            claims = [claim for claim in claims if "records no junit_sha256" not in claim]
        issues += claims
        facts = {**(backend_input.evidence_facts or {}), **run.sidecar}
        kind_issue = device_kind_issue(
            run.path.name, facts, backend=backend, expected=expected_kind
        )
        ran = any(case.outcome in RAN for case in run.cases)
        if kind_issue and ran:  # a run that ran nothing claims no device
            issues.append(kind_issue)
        issues += _figure_issues(run)
        recorded_ids = run.sidecar.get("collected_ids")
        if collected is not None and recorded_ids is not None:
            if len(recorded_ids) != len(collected) or set(recorded_ids) != set(collected):
                only_there = sorted(set(recorded_ids) - set(collected))
                only_here = sorted(set(collected) - set(recorded_ids))
                issues.append(
                    f"{run.path.name}: its sidecar says {len(recorded_ids)} tests were "
                    f"collected; collecting {backend} here gives {len(collected)} "
                    f"({len(only_there)} only in the sidecar, {len(only_here)} only here"
                    + (f", e.g. {only_here[0]}" if only_here else "")
                    + ")"
                )
    return CLAIMS_DISAGREE.issues(issues)
