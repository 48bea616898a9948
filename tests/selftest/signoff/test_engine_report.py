"""An engine run (``nox -s vllm``) on the sign-off's pages, from the files its session writes.

The JUnit file is pytest's xunit1 without the report plugin (no ``nodeid`` properties) and the
sidecar is `conformance.ci.engine_report.write_sidecar`'s, which records that the run finished
and its exit status but no start or end time. The provenance line must say the run finished,
and the engine's family modules (``test_family_a.py`` ...) fall in the matrix's columns of the
shared families, not in raw ``family_a/b/c`` columns of their own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.ci.engine_report import write_sidecar
from conformance.engines.target import KNOWN_FINDING, engine_target
from conformance.signoff.engine import run_signoff
from conformance.signoff.loading import family_of_node_id
from conformance.signoff.model import Status
from conformance.signoff.report_html import render_html
from conformance.signoff.report_json import signoff_document
from conformance.signoff.report_md import provenance_text, render_markdown, run_times
from conformance.targets import UNPADDED_DROPS_UPPER_BOUND

from synthetic_reports import SyntheticCase, junit_xml, node_ids, offline_options, write_backend

pytestmark = pytest.mark.selftest

ENGINE_IDS = [
    f"tests/engines/vllm/test_family_{family}.py::test_check[{index}]"
    for family in "abc"
    for index in range(2)
]


def _engine_run(reports: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    junit = reports / "junit" / "vllm.xml"
    junit.parent.mkdir(parents=True)
    cases = [SyntheticCase(node_id) for node_id in ENGINE_IDS]
    junit.write_text(junit_xml(cases, suite_name="mla-vllm", record_node_ids=False))
    facts = reports / "engines" / "vllm-0.33.0.json"
    facts.parent.mkdir(parents=True)
    facts.write_text(json.dumps({"builders": {"TRITON_MLA": {"status": "built"}}}))
    monkeypatch.chdir(reports.parent)  # the session runs from the repository root
    write_sidecar(
        junit,
        facts,
        target=engine_target("vllm"),
        version="0.33.0",
        versions={"vllm": "0.33.0", "torch": "2.9.0"},
        exitstatus=0,
        selection=None,
    )


@pytest.fixture
def document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    reports = tmp_path / "reports"
    _engine_run(reports, monkeypatch)
    write_backend(reports / "junit", "cpu", node_ids("metadata", 2) + node_ids("stubs", 2))
    result = run_signoff(offline_options(reports, write=False, require=["vllm"]))
    assert result.backends["vllm"].status == Status.PASS, result.backends["vllm"].reason
    return signoff_document(result)


def test_a_finished_engine_run_reads_as_finished(document: dict) -> None:
    (line,) = [line for line in provenance_text(document) if line.startswith("vllm ")]
    assert "not finished" not in line and "?" not in line, line
    assert "finished (exit 0)" in line, line


@pytest.mark.parametrize(
    ("run", "text"),
    [
        ({"started": "S", "finished_at": "F", "finished": True}, "S → F"),
        ({"started": "S", "finished": False}, "S → not finished"),
        ({"finished": False}, "not finished"),
        (
            {"finished": True, "exitstatus": 1},
            "finished (exit 1); start and end times not recorded",
        ),
    ],
)
def test_run_times_say_what_the_sidecar_records(run: dict, text: str) -> None:
    assert run_times(run) == text


def test_engine_families_fall_in_the_shared_columns(document: dict) -> None:
    assert document["families"] == ["metadata", "plan", "stubs"]
    (vllm,) = [backend for backend in document["backends"] if backend["backend"] == "vllm"]
    assert {family: counts["passed"] for family, counts in vllm["families"].items()} == {
        "metadata": 2,
        "stubs": 2,
        "plan": 2,
    }
    for page in (render_markdown(document), render_html(document)):
        assert "family_a" not in page.split("Evidence and provenance")[0]


def test_an_engine_run_records_no_expectation_file_and_draws_no_warning(document: dict) -> None:
    (vllm,) = [backend for backend in document["backends"] if backend["backend"] == "vllm"]
    assert not any("expectation file" in warning for warning in vllm["warnings"])
    assert [row["engine"] for row in vllm["expectation_files"]] == [True]


def test_family_of_a_plain_module_is_unchanged() -> None:
    assert family_of_node_id("tests/conformance/test_numerics.py::test_x") == "numerics"
    assert family_of_node_id("tests/engines/vllm/test_family_b.py::test_x") == "stubs"


def test_a_collecting_sign_off_collects_the_backends_and_never_an_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--release`` (or ``--collect``) collects each backend's ids with the suite's plugin;
    an engine's tests are collected by its own session, so asking the plugin for them would
    only fail ("unknown backend 'vllm'") and block the verdict."""
    reports = tmp_path / "reports"
    _engine_run(reports, monkeypatch)
    cpu_ids = node_ids("metadata", 2) + node_ids("stubs", 2)
    write_backend(reports / "junit", "cpu", cpu_ids)
    asked: list[str] = []

    def collector(backend: str) -> list[str]:
        asked.append(backend)
        return list(cpu_ids)

    options = offline_options(
        reports, write=False, require=["vllm"], collect=True, collector=collector
    )
    result = run_signoff(options)
    assert asked == ["cpu"]
    assert result.backends["vllm"].status == Status.PASS, result.backends["vllm"].reason
    assert not result.errors, result.errors


FINDING = (
    "tests/engines/vllm/test_family_a.py::test_transformation_keeps_every_needed_field[unpadded]"
)
FINDING_REASON = f"{KNOWN_FINDING}{UNPADDED_DROPS_UPPER_BOUND[FINDING.rpartition('/')[2]]}"


@pytest.mark.parametrize(
    ("version", "message", "status"),
    [
        ("0.29.0", FINDING_REASON, Status.PASS),  # the finding the target declares there
        ("0.29.0", "known finding: something else", Status.INCOMPLETE),
        ("0.33.0", FINDING_REASON, Status.INCOMPLETE),  # fixed there: no finding declared
    ],
)
def test_an_engine_xfail_is_explained_only_by_a_finding_of_the_run_s_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, message: str, status: Status
) -> None:
    reports = tmp_path / "reports"
    junit = reports / "junit" / "vllm.xml"
    junit.parent.mkdir(parents=True)
    cases = [SyntheticCase(node_id) for node_id in ENGINE_IDS]
    cases.append(SyntheticCase(FINDING, "xfail", message))
    junit.write_text(junit_xml(cases, suite_name="mla-vllm", record_node_ids=False))
    facts = reports / "engines" / f"vllm-{version}.json"
    facts.parent.mkdir(parents=True)
    facts.write_text(json.dumps({"builders": {"TRITON_MLA": {"status": "built"}}}))
    monkeypatch.chdir(reports.parent)
    write_sidecar(
        junit,
        facts,
        target=engine_target("vllm"),
        version=version,
        versions={"vllm": version, "torch": "2.9.0"},
        exitstatus=0,
        selection=None,
    )
    write_backend(reports / "junit", "cpu", node_ids("metadata", 2) + node_ids("stubs", 2))
    result = run_signoff(offline_options(reports, write=False, require=["vllm"]))
    vllm = result.backends["vllm"]
    assert vllm.status == status, vllm.reason
    if status == Status.INCOMPLETE:
        assert "xfail with no expectation entry" in vllm.reason
