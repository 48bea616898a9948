"""Synthetic JUnit reports and sidecars shaped like the ones pytest and the report plugin write.

A test double of the selftests (importable as ``synthetic_reports``: pyproject.toml puts
``tests/selftest/support`` on pytest's path), and executable documentation of both formats:
`write_backend` writes the files of one backend run, sharded or not, with chosen outcomes
per id; `write_engine_junit` the JUnit file of an engine run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from conformance.applicability import Declaration
from conformance.runs.names import Shard, junit_name, sidecar_path
from conformance.runs.record import SIDECAR_FORMAT
from conformance.runs.shards import select_for_shard
from conformance.signoff.engine import SignoffOptions
from conformance.signoff.evidence import VERSIONS_FILE
from conformance.signoff.fingerprint import FINGERPRINT_KEY, fingerprint
from conformance.signoff.machine import StaticView
from conformance.targets import device_of

OUTCOMES = ("passed", "failed", "error", "skipped", "xfail")


@dataclass
class SyntheticCase:
    """One ``<testcase>``: ``outcome`` is one of `OUTCOMES`."""

    node_id: str
    outcome: str = "passed"
    message: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)


def node_ids(family: str, count: int, *, test: str = "test_case") -> list[str]:
    """``count`` parametrized ids of ``tests/conformance/test_<family>.py``."""
    return [f"tests/conformance/test_{family}.py::{test}[{index}]" for index in range(count)]


def _classname_and_name(node_id: str) -> tuple[str, str]:
    module, separator, rest = node_id.partition("::")
    if not separator:  # a collection error: pytest names the module, with no class
        return "", module.removesuffix(".py").replace("/", ".")
    parts = rest.split("::")
    classname = ".".join([module.removesuffix(".py").replace("/", "."), *parts[:-1]])
    return classname, parts[-1]


def junit_xml(
    cases: Sequence[SyntheticCase],
    *,
    suite_name: str = "mla-cpu",
    suite_properties: Mapping[str, str] | None = None,
    record_node_ids: bool = True,
) -> str:
    """A JUnit document in pytest's xunit2 shape."""
    suite = ElementTree.Element(
        "testsuite",
        name=suite_name,
        errors="0",
        failures="0",
        skipped="0",
        tests=str(len(cases)),
        time="0.1",
        timestamp="2026-01-01T00:00:00+00:00",
        hostname="synthetic",
    )
    if suite_properties:
        properties = ElementTree.SubElement(suite, "properties")
        for name, value in suite_properties.items():
            ElementTree.SubElement(properties, "property", name=name, value=value)
    for case in cases:
        if case.outcome not in OUTCOMES:
            raise ValueError(f"outcome {case.outcome!r} is not one of {OUTCOMES}")
        classname, name = _classname_and_name(case.node_id)
        element = ElementTree.SubElement(
            suite, "testcase", classname=classname, name=name, time="0.001"
        )
        properties = dict(case.properties)
        if record_node_ids:
            properties.setdefault("nodeid", case.node_id)
        if properties:
            holder = ElementTree.SubElement(element, "properties")
            for prop_name, value in properties.items():
                ElementTree.SubElement(holder, "property", name=prop_name, value=str(value))
        if case.outcome in ("failed", "error"):
            tag = "failure" if case.outcome == "failed" else "error"
            child = ElementTree.SubElement(element, tag, message=case.message or "boom")
            child.text = case.message or "boom"
        elif case.outcome == "skipped":
            ElementTree.SubElement(element, "skipped", type="pytest.skip", message=case.message)
        elif case.outcome == "xfail":
            ElementTree.SubElement(element, "skipped", type="pytest.xfail", message=case.message)
    root = ElementTree.Element("testsuites", name="pytest tests")
    root.append(suite)
    return '<?xml version="1.0" encoding="utf-8"?>' + ElementTree.tostring(root, "unicode")


def sidecar_document(
    backend: str,
    shard: Shard | None,
    *,
    collected: Sequence[str],
    selected: Sequence[str],
    run_id: str = "run-1",
    **changes: Any,
) -> dict[str, Any]:
    """A sidecar as the report plugin writes it (override any field with ``changes``)."""
    device = device_of(backend, load_plugins=False)
    kind = "cpu" if device is None else device.name
    document: dict[str, Any] = {
        "format": SIDECAR_FORMAT,
        "backend": backend,
        "shard": None if shard is None else str(shard),
        "junit": junit_name(backend, shard),
        "run_id": run_id,
        "started": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:01:00+00:00",
        "finished": True,
        "exitstatus": 0,
        "collected_ids": list(collected),
        "selected_ids": list(selected),
        "filtered_out": 0,
        "available": True,
        "availability_reason": "",
        "device": "Synthetic CPU" if kind == "cpu" else "Synthetic GPU",
        "device_kind": kind,
        "versions": {"torch": "2.13.0", "triton": "3.9.0", "aiter": None},
        "python": "3.11.7",
        "hostname": "synthetic",
        "git_commit": "0123456789abcdef",
    }
    document.update(changes)
    return document


def sha256_of(path: Path) -> str:
    """The sha256 of a file, as the report plugin records it for its JUnit file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def edit_sidecar(path: Path, **changes: object) -> None:
    """Change fields of the sidecar at ``path`` in place."""
    document = json.loads(path.read_text(encoding="utf-8"))
    document.update(changes)
    path.write_text(json.dumps(document), encoding="utf-8")


def rewrite_junit(junit: Path, text: str) -> None:
    """Replace a run's JUnit file with ``text`` and record its sha256 in the sidecar, as if
    the run had written it (the edit is then judged by its content alone)."""
    junit.write_text(text, encoding="utf-8")
    edit_sidecar(sidecar_path(junit), junit_sha256=sha256_of(junit))


def add_figures(junit: Path, figures: Mapping[str, str], modules: str = "numerics|plan") -> None:
    """Give the cases of ``tests/conformance/test_<modules>`` in `junit` error figures (resealed).

    `modules` is a regular expression over the module name's tail (``numerics|plan``).
    """
    properties = "".join(f'<property name="{k}" value="{v}" />' for k, v in figures.items())
    text = re.sub(
        rf'(<testcase classname="tests\.conformance\.test_(?:{modules})"[^>]*><properties>)',
        rf"\1{properties}",
        junit.read_text(),
    )
    rewrite_junit(junit, text)


def write_backend(
    directory: Path,
    backend: str,
    ids: Sequence[str],
    *,
    shards: int | None = None,
    outcomes: Mapping[str, str] | None = None,
    messages: Mapping[str, str] | None = None,
    skips: Mapping[str, str] | None = None,
    sidecars: bool = True,
) -> list[Path]:
    """Write the JUnit file(s) (and sidecars) of one complete run of ``backend``.

    ``outcomes`` maps ids to a non-passing outcome; ``messages`` gives their messages;
    ``skips`` maps ids that skip to their messages. Returns the JUnit paths, in shard order.
    """
    skips = skips or {}
    outcomes = {**dict.fromkeys(skips, "skipped"), **(outcomes or {})}
    messages = {**skips, **(messages or {})}
    directory.mkdir(parents=True, exist_ok=True)
    layout: list[Shard | None] = (
        [None] if shards is None else [Shard(index, shards) for index in range(1, shards + 1)]
    )
    written = []
    for shard in layout:
        selected = list(ids) if shard is None else select_for_shard(ids, shard)
        cases = [
            SyntheticCase(
                node_id,
                outcomes.get(node_id, "passed"),
                messages.get(node_id, ""),
                {
                    "backend": backend,
                    "family": node_id.split("test_", 1)[1].split(".py")[0],
                    # a real golden decode comparison records its error figures
                    **(
                        {"out_max_abs_err": "0.001"}
                        if "::test_decode_matches_golden" in node_id
                        else {}
                    ),
                },
            )
            for node_id in selected
        ]
        path = directory / junit_name(backend, shard)
        text = junit_xml(cases, suite_name=f"mla-{backend}")
        path.write_text(text, encoding="utf-8")
        if sidecars:
            document = sidecar_document(
                backend, shard, collected=ids, selected=selected, junit_sha256=sha256_of(path)
            )
            sidecar_path(path).write_text(json.dumps(document), encoding="utf-8")
        written.append(path)
    return written


def write_evidence(directory: Path, backend: str, ids: Sequence[str], **kwargs: Any) -> list[Path]:
    """An evidence directory of ``backend``, fingerprinted from the checkout in the working
    directory (as `save_evidence` writes it)."""
    paths = write_backend(directory, backend, ids, **kwargs)
    facts = {
        "backend": backend,
        "source": "synthetic",
        FINGERPRINT_KEY: fingerprint(backend, Path.cwd()),
    }
    (directory / VERSIONS_FILE).write_text(json.dumps(facts), encoding="utf-8")
    return paths


def write_engine_junit(directory: Path, engine: str, outcomes: Mapping[str, str]) -> Path:
    """The JUnit file of an engine run (``<engine>.xml``, as its session writes it): one test
    of each name in ``outcomes``, with its outcome (one of `OUTCOMES`)."""
    cases = [
        SyntheticCase(f"tests/engines/{engine}/test_family_a.py::{name}", outcome)
        for name, outcome in outcomes.items()
    ]
    path = directory / junit_name(engine, None)
    path.write_text(junit_xml(cases, suite_name=f"mla-{engine}"), encoding="utf-8")
    return path


def offline_options(
    reports_dir: Path,
    *,
    runnable: Sequence[str] | None = ("cpu",),
    declarations: Mapping[str, Declaration] | None = None,
    **changes: Any,
) -> SignoffOptions:
    """`SignoffOptions` over ``reports_dir`` that never asks the real registry.

    ``runnable`` plays ``available_backends()`` (None: a registry that cannot be imported);
    the other built-in backends are unavailable with a fixed reason. ``declarations`` are
    the backends' declarations (none by default).
    """
    reasons = {
        name: f"backend {name} unavailable: no {name} device on this machine"
        for name in ("cpu", "interpret", "cuda", "rocm")
        if runnable is None or name not in runnable
    }
    view = StaticView(
        names=("cpu", "interpret", "cuda", "rocm"),
        runnable_names=runnable,
        reasons=reasons,
        declarations=dict(declarations or {}),
    )
    settings: dict[str, Any] = {"reports_dir": reports_dir, "evidence_dir": None, "backends": view}
    if "expectations_dir" in changes:  # the test's own expectation files play the repository's
        settings["repository_expectations"] = changes["expectations_dir"]
    settings.update(changes)
    return SignoffOptions(**settings)
