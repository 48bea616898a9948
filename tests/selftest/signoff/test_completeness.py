"""Completeness: a crashed, deleted, cut-short or duplicated shard is INCOMPLETE, never PASS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.signoff.engine import run_signoff
from conformance.signoff.model import Status, Verdict

from synthetic_reports import (
    SyntheticCase,
    edit_sidecar,
    junit_xml,
    node_ids,
    offline_options,
    sidecar_document,
    write_backend,
)

IDS = node_ids("metadata", 20) + node_ids("stubs", 10) + node_ids("persistent", 10)


def junit(tmp_path: Path) -> Path:
    return tmp_path / "reports" / "junit"


def sign(tmp_path: Path, **changes):
    result = run_signoff(offline_options(tmp_path / "reports", write=False, **changes))
    return result, result.backends["cpu"]


def test_a_complete_sharded_run_passes(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS, shards=4)
    result, cpu = sign(tmp_path)
    assert (result.verdict, cpu.status) == (Verdict.PASS, Status.PASS)
    assert cpu.completeness.expected_count == len(IDS)
    assert len(cpu.cases) == len(IDS)


def test_a_deleted_shard_is_named_with_the_ids_it_owed(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS, shards=4)
    owed = json.loads((junit(tmp_path) / "cpu-shard-3-of-4.meta.json").read_text())
    (junit(tmp_path) / "cpu-shard-3-of-4.xml").unlink()
    (junit(tmp_path) / "cpu-shard-3-of-4.meta.json").unlink()
    result, cpu = sign(tmp_path)
    assert (result.verdict, cpu.status) == (Verdict.INCOMPLETE, Status.INCOMPLETE)
    assert "cpu-shard-3-of-4.xml is missing: shard 3/4 did not report" in cpu.reason
    assert sorted(cpu.completeness.missing["cpu-shard-3-of-4.xml"]) == sorted(owed["selected_ids"])
    assert any("cpu-shard-3-of-4.xml (missing)" in issue for issue in cpu.issues)
    assert any("cpu-shard-3-of-4.xml" in line for line in result.blocking)


def test_a_crash_before_pytest_wrote_its_report_leaves_the_sidecar(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS, shards=2)
    (junit(tmp_path) / "cpu-shard-2-of-2.xml").unlink()
    edit_sidecar(junit(tmp_path) / "cpu-shard-2-of-2.meta.json", finished=False)
    _, cpu = sign(tmp_path)
    assert cpu.status == Status.INCOMPLETE
    assert any(
        "cpu-shard-2-of-2.xml is missing but its sidecar cpu-shard-2-of-2.meta.json exists" in issue
        for issue in cpu.issues
    )
    assert any("cpu-shard-2-of-2.xml (never written)" in issue for issue in cpu.issues)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"finished": False}, "never finished (crashed or killed)"),
        ({"exitstatus": 2}, "exit status 2 (interrupted)"),
        ({"exitstatus": 3}, "exit status 3 (internal error)"),
        ({"filtered_out": 4}, "4 tests were deselected"),
        ({"backend": "rocm"}, "its sidecar says backend 'rocm'"),
        ({"shard": "1/2"}, "its sidecar says shard '1/2'"),
    ],
)
def test_a_run_cut_short_is_incomplete_with_the_reason(
    tmp_path: Path, changes: dict, fragment: str
) -> None:
    write_backend(junit(tmp_path), "cpu", IDS)
    edit_sidecar(junit(tmp_path) / "cpu.meta.json", **changes)
    result, cpu = sign(tmp_path)
    assert result.verdict == Verdict.INCOMPLETE
    assert any(fragment in issue and issue.startswith("cpu.xml") for issue in cpu.issues), (
        cpu.issues
    )


def test_a_stale_junit_next_to_a_new_sidecar_is_caught_by_run_id(tmp_path: Path) -> None:
    path = junit(tmp_path) / "cpu.xml"
    path.parent.mkdir(parents=True)
    path.write_text(junit_xml([SyntheticCase(i) for i in IDS], suite_properties={"run_id": "old"}))
    document = sidecar_document("cpu", None, collected=IDS, selected=IDS, run_id="new")
    (junit(tmp_path) / "cpu.meta.json").write_text(json.dumps(document))
    _, cpu = sign(tmp_path)
    assert cpu.status == Status.INCOMPLETE
    assert any("different runs (run_id old vs new)" in issue for issue in cpu.issues)


def test_ids_missing_from_a_present_file_are_attributed_to_it(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS)
    (junit(tmp_path) / "cpu.xml").write_text(junit_xml([SyntheticCase(i) for i in IDS[:-3]]))
    _, cpu = sign(tmp_path)
    assert cpu.completeness.missing == {"cpu.xml": IDS[-3:]}
    assert any("3 expected ids not reported; cpu.xml (present)" in i for i in cpu.issues)


def test_ids_nobody_collected_are_reported(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS)
    extra = "tests/conformance/test_metadata.py"  # a collection error's id
    cases = [SyntheticCase(i) for i in IDS] + [SyntheticCase(extra, "error", "collection failure")]
    (junit(tmp_path) / "cpu.xml").write_text(junit_xml(cases))
    result, cpu = sign(tmp_path)
    assert result.verdict == Verdict.FAIL, "the collection error is an error"
    assert cpu.completeness.unexpected == [extra]


def test_shards_that_collected_different_sets_are_flagged(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS, shards=2)
    edit_sidecar(junit(tmp_path) / "cpu-shard-2-of-2.meta.json", collected_ids=IDS[:-1])
    _, cpu = sign(tmp_path)
    assert any("collected different test sets" in issue for issue in cpu.issues)


def test_unsharded_and_sharded_files_together_are_flagged(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS, shards=2)
    write_backend(junit(tmp_path), "cpu", IDS)
    _, cpu = sign(tmp_path)
    assert any("both cpu.xml and sharded files are present" in i for i in cpu.issues)
    assert len(cpu.completeness.duplicates) == len(IDS)


def test_shard_files_of_different_splits_are_flagged(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS, shards=2)
    write_backend(junit(tmp_path), "cpu", IDS, shards=3)
    _, cpu = sign(tmp_path)
    assert any("split [2, 3] ways at once" in issue for issue in cpu.issues)


def test_without_sidecars_completeness_cannot_be_shown(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS, sidecars=False)
    result, cpu = sign(tmp_path)
    assert result.verdict == Verdict.INCOMPLETE
    assert any("no readable sidecar cpu.meta.json" in issue for issue in cpu.issues)


def test_collect_supplies_the_expected_ids_but_not_the_missing_sidecar(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS, sidecars=False)
    result, cpu = sign(tmp_path, collect=True, collector=lambda backend: list(IDS))
    assert cpu.completeness.expected_source == "collect" and not cpu.completeness.missing
    assert result.verdict == Verdict.INCOMPLETE
    assert cpu.reason.startswith("cpu.xml: no readable sidecar, so its provenance and sha256")


def test_collect_overrides_a_sidecar_that_missed_tests(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS[:-2])
    _, cpu = sign(tmp_path, collect=True, collector=lambda backend: list(IDS))
    assert cpu.status == Status.INCOMPLETE
    assert sorted(cpu.completeness.missing["cpu.xml"]) == sorted(IDS[-2:])


def test_a_run_that_collected_nothing_is_not_a_pass(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", [])
    result, cpu = sign(tmp_path)
    assert result.verdict == Verdict.INCOMPLETE
    assert "no tests were collected for cpu" in cpu.reason


def test_a_required_backend_without_reports_is_incomplete_with_its_reason(
    tmp_path: Path,
) -> None:
    write_backend(junit(tmp_path), "cpu", IDS)
    result = run_signoff(
        offline_options(tmp_path / "reports", write=False, require=["cpu", "cuda"])
    )
    assert result.verdict == Verdict.INCOMPLETE
    assert result.backends["cuda"].status == Status.NOT_RUN
    assert (
        "cuda: required but not run: backend cuda unavailable: no cuda device on this machine"
        in result.blocking
    )
