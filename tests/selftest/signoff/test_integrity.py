"""Integrity: every claim of a report is cross-checked; a disagreement names both values."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.signoff.engine import run_signoff
from conformance.signoff.integrity import claimed_device_kind
from conformance.signoff.model import Status, Verdict

from synthetic_reports import (
    SyntheticCase,
    edit_sidecar,
    junit_xml,
    node_ids,
    offline_options,
    rewrite_junit,
    write_backend,
)

CPU_IDS = node_ids("metadata", 7) + node_ids("persistent", 4)
CUDA_IDS = node_ids("metadata", 7) + node_ids("persistent", 2)  # cuda collects fewer
COLLECTED = {"cpu": CPU_IDS, "interpret": CPU_IDS, "cuda": CUDA_IDS, "rocm": CUDA_IDS}


def junit(tmp_path: Path) -> Path:
    return tmp_path / "reports" / "junit"


def release(tmp_path: Path, **changes):
    options = offline_options(
        tmp_path / "reports",
        write=False,
        release=True,
        collector=lambda backend: list(COLLECTED[backend]),
        **changes,
    )
    return run_signoff(options)


def honest_release(tmp_path: Path) -> None:
    for backend in ("cpu", "cuda", "rocm"):
        write_backend(junit(tmp_path), backend, COLLECTED[backend])


def test_an_honest_release_passes(tmp_path: Path) -> None:
    honest_release(tmp_path)
    result = release(tmp_path)
    assert result.verdict == Verdict.PASS, result.blocking


def test_the_forged_release_pass_is_incomplete_naming_both_values(tmp_path: Path) -> None:
    """The issue's recipe: cpu.xml copied to cuda.xml and rocm.xml, sidecars with only
    ``backend`` and ``junit`` edited."""
    write_backend(junit(tmp_path), "cpu", CPU_IDS)
    for backend in ("cuda", "rocm"):
        shutil.copy(junit(tmp_path) / "cpu.xml", junit(tmp_path) / f"{backend}.xml")
        shutil.copy(junit(tmp_path) / "cpu.meta.json", junit(tmp_path) / f"{backend}.meta.json")
        edit_sidecar(
            junit(tmp_path) / f"{backend}.meta.json", backend=backend, junit=f"{backend}.xml"
        )
    result = release(tmp_path)
    assert result.verdict == Verdict.INCOMPLETE
    assert result.backends["cpu"].status == Status.PASS
    for backend in ("cuda", "rocm"):
        state = result.backends[backend]
        assert state.status == Status.INCOMPLETE
        issues = "\n".join(state.issues)
        assert f"JUnit suite named mla-cpu, the file name says 'mla-{backend}'" in issues
        assert (
            f"11 testcases carry property backend='cpu', the file name says '{backend}'" in issues
        )
        assert (
            f"backend {backend} runs on a {backend} device, but the run's provenance shows cpu"
            in issues
        )
        assert (
            f"its sidecar says 11 tests were collected; collecting {backend} here gives 9" in issues
        )
        assert any(
            line.startswith(f"{backend}: INCOMPLETE: {backend}.xml: JUnit suite")
            for line in result.blocking
        )


def test_a_forged_legacy_sidecar_is_caught_by_its_torch_build(tmp_path: Path) -> None:
    honest_release(tmp_path)
    edit_sidecar(
        junit(tmp_path) / "cuda.meta.json",
        device_kind=None,
        device="Intel(R) Xeon(R) Platinum 8480+",
        torch_cuda=None,
        versions={"torch": "2.13.0+cpu"},
    )
    cuda = release(tmp_path).backends["cuda"]
    assert cuda.status == Status.INCOMPLETE
    assert (
        "provenance shows cpu (device 'Intel(R) Xeon(R) Platinum 8480+', torch 2.13.0+cpu"
        in cuda.reason
    )


@pytest.mark.parametrize(
    ("facts", "kind"),
    [
        ({"device_kind": "rocm"}, "rocm"),
        (
            {"device": "NVIDIA H200", "torch_cuda": "13.0", "versions": {"torch": "2.11.0+cu130"}},
            "cuda",
        ),
        (
            {"device": "AMD Instinct MI300X (gfx942)", "torch_hip": "6.3", "torch_cuda": None},
            "rocm",
        ),
        ({"device": None, "torch_cuda": "13.0"}, "cpu"),
        ({"device": "NVIDIA H200", "torch_cuda": "13.0", "available": False}, "none"),
    ],
)
def test_the_device_kind_a_provenance_shows(facts: dict, kind: str) -> None:
    assert claimed_device_kind(facts)[0] == kind


def test_a_sidecar_cut_to_five_ids_with_a_five_case_junit_is_incomplete(tmp_path: Path) -> None:
    honest_release(tmp_path)
    write_backend(junit(tmp_path), "cpu", CPU_IDS[:5])  # collected_ids = the 5 it reports
    cpu = release(tmp_path).backends["cpu"]
    assert cpu.status == Status.INCOMPLETE
    expected = "cpu.xml: its sidecar says 5 tests were collected; collecting cpu here gives 11 "
    assert any(i.startswith(expected + "(0 only in the sidecar, 6 only here") for i in cpu.issues)
    assert any("6 expected ids not reported" in issue for issue in cpu.issues)
    trusting = release(tmp_path, no_collect=True).backends["cpu"]
    assert trusting.status == Status.PASS, "without collection the sidecar is all there is"


def test_the_same_id_twice_in_one_file_is_incomplete(tmp_path: Path) -> None:
    honest_release(tmp_path)
    cases = [SyntheticCase(node_id) for node_id in CPU_IDS] + [SyntheticCase(CPU_IDS[2])]
    rewrite_junit(junit(tmp_path) / "cpu.xml", junit_xml(cases))
    cpu = release(tmp_path).backends["cpu"]
    assert cpu.status == Status.INCOMPLETE
    assert any(
        f"1 ids appear more than once in the file (not pytest's failure-plus-teardown pair): "
        f"{CPU_IDS[2]}" in issue
        for issue in cpu.issues
    )


def test_an_edited_junit_file_no_longer_matches_its_sidecar(tmp_path: Path) -> None:
    honest_release(tmp_path)
    path = junit(tmp_path) / "cpu.xml"
    path.write_text(path.read_text().replace('time="0.001"', 'time="0.002"'))
    cpu = release(tmp_path).backends["cpu"]
    assert cpu.status == Status.INCOMPLETE
    assert "(the file was edited or replaced after the run)" in cpu.reason


def test_a_sidecar_without_a_junit_hash_is_incomplete(tmp_path: Path) -> None:
    honest_release(tmp_path)
    edit_sidecar(junit(tmp_path) / "rocm.meta.json", junit_sha256=None)
    rocm = release(tmp_path).backends["rocm"]
    assert rocm.status == Status.INCOMPLETE
    assert "rocm.xml: its sidecar records no junit_sha256" in rocm.reason


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"junit": "cpu-shard-1-of-2.xml"},
            "its sidecar was written for JUnit file 'cpu-shard-1-of-2.xml', not 'cpu.xml'",
        ),
        (
            {"backend": "interpret"},
            "its sidecar says backend 'interpret', the file name says 'cpu'",
        ),
        (
            {"device_kind": "cuda"},
            "backend cpu runs on a cpu device, but the run's provenance shows cuda",
        ),
        (
            {"selection": "partial", "selection_reason": "-k persistent"},
            "the run selected part of the tests (-k persistent); a sign-off needs the full set",
        ),
        ({"selection": "partial"}, "the run selected part of the tests (no reason recorded)"),
    ],
)
def test_each_sidecar_claim_is_checked(tmp_path: Path, changes: dict, message: str) -> None:
    honest_release(tmp_path)
    edit_sidecar(junit(tmp_path) / "cpu.meta.json", **changes)
    cpu = release(tmp_path).backends["cpu"]
    assert cpu.status == Status.INCOMPLETE
    assert any(message in issue for issue in cpu.issues), cpu.issues


def test_a_full_selection_is_fine(tmp_path: Path) -> None:
    honest_release(tmp_path)
    edit_sidecar(junit(tmp_path) / "cpu.meta.json", selection="full")
    assert release(tmp_path).backends["cpu"].status == Status.PASS


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('tests="11"', 'tests="12"', "its suites declare tests=12 but hold 11 distinct test ids"),
        (
            'name="mla-cpu"',
            'name="jest tests"',
            "JUnit suite named jest tests, the file name says 'mla-cpu'",
        ),
        (
            '<testsuite name="mla-cpu"',
            '<testsuite name="mla-cpu"><properties><property name="backend" value="rocm" />'
            '</properties></testsuite><testsuite name="mla-cpu"',
            "suite property backend='rocm', the file name says 'cpu'",
        ),
    ],
)
def test_each_junit_claim_is_checked(tmp_path: Path, old: str, new: str, message: str) -> None:
    honest_release(tmp_path)
    path = junit(tmp_path) / "cpu.xml"
    assert old in path.read_text()
    rewrite_junit(path, path.read_text().replace(old, new, 1))
    cpu = release(tmp_path).backends["cpu"]
    assert cpu.status == Status.INCOMPLETE
    assert any(message in issue for issue in cpu.issues), cpu.issues


def test_a_run_that_ran_nothing_claims_no_device(tmp_path: Path) -> None:
    """A GPU-less machine's cuda.xml (every test unavailable) is NOT RUN, not a device clash."""
    write_backend(junit(tmp_path), "cpu", CPU_IDS)
    message = "backend cuda unavailable: no CUDA device"
    write_backend(junit(tmp_path), "cuda", CUDA_IDS, skips=dict.fromkeys(CUDA_IDS, message))
    edit_sidecar(junit(tmp_path) / "cuda.meta.json", device_kind="none", available=False)
    cuda = release(tmp_path).backends["cuda"]
    assert cuda.status == Status.NOT_RUN
    assert not any("provenance shows" in issue for issue in cuda.issues)
