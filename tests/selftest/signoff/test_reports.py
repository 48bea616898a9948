"""The sign-off's outputs, evidence, command line and exit codes, and real pytest reports."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml

from conformance.runs.atomic import atomic_write_text
from conformance.signoff import cli
from conformance.signoff import evidence as evidence_module
from conformance.signoff.collect import collect_ids, parse_collect_output
from conformance.signoff.engine import run_signoff
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.evidence import save_evidence
from conformance.signoff.machine import RegistryView
from conformance.signoff.model import Status, Verdict

from synthetic_reports import (
    node_ids,
    offline_options,
    sha256_of,
    write_backend,
    write_evidence,
)

pytest_plugins = ["pytester"]

IDS = node_ids("metadata", 8) + node_ids("stubs", 4) + node_ids("persistent", 6)
UNAVAILABLE = "backend {name} unavailable: no {name} device"


def write_unavailable(junit: Path, name: str) -> None:
    message = UNAVAILABLE.format(name=name)
    write_backend(junit, name, IDS, skips=dict.fromkeys(IDS, message))


@pytest.fixture
def laptop(tmp_path: Path, monkeypatch) -> Path:
    """What a plain `nox` leaves on a laptop: cpu and interpret ran, cuda and rocm could not."""
    junit = tmp_path / "reports" / "junit"
    write_backend(junit, "cpu", IDS, shards=2)
    write_backend(junit, "interpret", IDS)
    write_unavailable(junit, "cuda")
    write_unavailable(junit, "rocm")
    monkeypatch.setattr(RegistryView, "runnable", lambda self: ["cpu", "interpret"])
    monkeypatch.setattr(RegistryView, "registered", lambda self: [])
    for name in ("backends/cpu.py", "backends/triton_backend.py", "backends/rocm/backend.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "reports"


def save(laptop: Path, backend: str = "cpu", **changes) -> Path:
    """`save_evidence` of the laptop's reports, as the CLI calls it."""
    settings = {"root": laptop.parent, "expected_kind": "cpu", **changes}
    return save_evidence(laptop / "junit", backend, laptop / "evidence", **settings)


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.main(parser.parse_args(list(argv)))


# --- the acceptance scenario ----------------------------------------------------------------


def test_a_laptop_run_signs_off_what_it_ran(laptop: Path, capsys) -> None:
    assert run_cli() == 0
    out = capsys.readouterr().out
    assert "MLA conformance sign-off: PASS" in out
    document = json.loads((laptop / "signoff.json").read_text())
    statuses = {b["backend"]: (b["status"], b["required"]) for b in document["backends"]}
    assert statuses == {
        "cpu": ("PASS", True),
        "interpret": ("PASS", True),
        "cuda": ("NOT RUN", False),
        "rocm": ("NOT RUN", False),
    }
    markdown = (laptop / "signoff.md").read_text()
    assert "- cuda NOT RUN (optional): no cuda device" in markdown
    assert "- rocm NOT RUN (optional): no rocm device" in markdown
    html = (laptop / "signoff.html").read_text()
    assert "<h2>Not signed off here</h2>" in html and "Nothing stops a PASS" in html


def test_a_release_sign_off_of_the_same_reports_names_what_is_missing(laptop: Path, capsys) -> None:
    assert run_cli("--release") == 3
    out = capsys.readouterr().out
    assert "MLA conformance sign-off: INCOMPLETE" in out
    assert "blocking: cuda: required but not run: no cuda device" in out
    assert "blocking: rocm: required but not run: no rocm device" in out
    merged = JUnitXml.fromfile(str(laptop / "conformance.xml"))
    signoff_suite = next(suite for suite in merged if suite.name == "mla-signoff")
    assert {case.name for case in signoff_suite} >= {
        "cuda not run: no cuda device",
        "rocm not run: no rocm device",
    }
    assert merged.errors >= 2


@pytest.mark.parametrize("damage", ["delete", "corrupt"])
def test_a_lost_or_corrupt_shard_turns_the_verdict_incomplete(
    laptop: Path, capsys, damage: str
) -> None:
    shard = laptop / "junit" / "cpu-shard-2-of-2.xml"
    if damage == "delete":
        shard.unlink()
    else:
        shard.write_bytes(shard.read_bytes()[:-40])
    assert run_cli() == 3
    out = capsys.readouterr().out
    assert "cpu        INCOMPLETE" in out
    assert "cpu-shard-2-of-2.xml" in out


def test_exit_codes_follow_the_verdict(laptop: Path, capsys) -> None:
    assert run_cli("--require", "cpu") == 0
    write_backend(laptop / "junit", "cpu", IDS, shards=2, outcomes={IDS[0]: "failed"})
    assert run_cli("--require", "cpu") == 1
    assert run_cli("--require", "cpu,metal") == 2
    assert "unknown backends ['metal']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        run_cli("--require", ",")
    assert caught.value.code == 2


def test_without_a_registry_the_backends_that_ran_are_required(laptop: Path) -> None:
    result = run_signoff(offline_options(laptop, runnable=None, write=False))
    assert result.required == ["cpu", "interpret"]
    assert result.verdict == Verdict.PASS
    assert "cannot tell" in result.required_source


# --- outputs --------------------------------------------------------------------------------


def test_the_merged_junit_keeps_every_suite_with_its_facts(laptop: Path) -> None:
    run_signoff(offline_options(laptop, runnable=["cpu", "interpret"]))
    merged = JUnitXml.fromfile(str(laptop / "conformance.xml"))
    suites = {
        (suite.name, {p.name: p.value for p in suite.properties()}.get("shard")): suite
        for suite in merged
    }
    assert set(suites) >= {("mla-cpu", "1/2"), ("mla-cpu", "2/2"), ("mla-interpret", None)}
    properties = {p.name: p.value for p in suites[("mla-cpu", "1/2")].properties()}
    assert properties["source_file"] == "cpu-shard-1-of-2.xml"
    assert properties["device"] == "Synthetic CPU"
    assert properties["torch_version"] == "2.13.0"
    assert properties["git_commit"] == "0123456789abcdef"
    assert merged.tests == sum(suite.tests for suite in merged)
    cpu_cases = suites[("mla-cpu", "1/2")].tests + suites[("mla-cpu", "2/2")].tests
    assert cpu_cases == len(IDS)


def test_reports_escape_hostile_messages(tmp_path: Path) -> None:
    hostile = "</pre><script>alert(1)</script> ``` | pipe"
    write_backend(
        tmp_path / "reports" / "junit", "cpu", IDS, outcomes={IDS[0]: "failed"},
        messages={IDS[0]: hostile},
    )  # fmt: skip
    result = run_signoff(offline_options(tmp_path / "reports"))
    assert result.verdict == Verdict.FAIL
    html = (tmp_path / "reports" / "signoff.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "http://" not in html and "https://" not in html, "self-contained"
    markdown = (tmp_path / "reports" / "signoff.md").read_text()
    assert "````\n" + hostile + "\n````" in markdown, "the fence outgrows the message's"
    document = json.loads((tmp_path / "reports" / "signoff.json").read_text())
    (problem,) = document["backends"][0]["problems"]
    assert (problem["id"], problem["message"]) == (IDS[0], hostile)


def test_the_family_matrix_counts_outcomes(tmp_path: Path) -> None:
    write_backend(
        tmp_path / "reports" / "junit", "cpu", IDS,
        outcomes={IDS[0]: "failed", IDS[9]: "xfail"},
        messages={IDS[9]: "expected failure (cpu.txt:2): known"},
    )  # fmt: skip
    run_signoff(offline_options(tmp_path / "reports"))
    document = json.loads((tmp_path / "reports" / "signoff.json").read_text())
    assert document["families"] == ["metadata", "persistent", "stubs"]
    cpu = document["backends"][0]
    assert cpu["families"]["metadata"]["failed"] == 1
    assert cpu["families"]["metadata"]["passed"] == 7
    assert cpu["families"]["stubs"]["xfail"] == 1
    html = (tmp_path / "reports" / "signoff.html").read_text()
    assert "Backend × family" in html and "7 passed, 1 failed" in html


# --- evidence -------------------------------------------------------------------------------


def test_committed_evidence_stands_in_for_a_backend_with_its_date(laptop: Path, capsys) -> None:
    for name in ("cuda", "rocm"):
        (laptop / "junit" / f"{name}.xml").unlink()
        (laptop / "junit" / f"{name}.meta.json").unlink()
    cuda = write_evidence(laptop / "evidence" / "2026-03-01-cuda", "cuda", IDS, shards=2)
    facts = json.loads((cuda[0].parent / "versions.json").read_text())
    facts["source"] = "H200 box, run 42"
    (cuda[0].parent / "versions.json").write_text(json.dumps(facts))
    write_backend(laptop / "evidence" / "2026-01-01-cuda", "cuda", IDS, outcomes={IDS[0]: "failed"})
    write_evidence(laptop / "evidence" / "2026-03-02-rocm", "rocm", IDS)
    assert run_cli("--release", "--no-collect") == 0
    out = capsys.readouterr().out
    assert "cuda       PASS       (required) [evidence 2026-03-01]" in out
    document = json.loads((laptop / "signoff.json").read_text())
    cuda_doc = next(b for b in document["backends"] if b["backend"] == "cuda")
    assert cuda_doc["evidence"]["date"] == "2026-03-01"
    assert cuda_doc["evidence"]["facts"]["source"] == "H200 box, run 42"
    assert cuda_doc["evidence"]["stale"] == []
    assert any("2026-01-01-cuda: older" in warning for warning in document["warnings"])
    assert "evidence of 2026-03-01" in (laptop / "signoff.md").read_text()
    assert "H200 box, run 42" in (laptop / "signoff.html").read_text()
    assert run_cli("--release", "--no-collect", "--no-evidence") == 3


def test_local_reports_win_over_evidence(laptop: Path) -> None:
    write_backend(laptop / "evidence" / "2026-03-01-cpu", "cpu", IDS, outcomes={IDS[0]: "failed"})
    result = run_signoff(offline_options(laptop, evidence_dir=laptop / "evidence", write=False))
    assert result.backends["cpu"].input.source == "local"
    assert result.verdict == Verdict.PASS
    assert any("cpu has reports of its own" in warning for warning in result.warnings)


def test_broken_evidence_is_named(laptop: Path) -> None:
    (laptop / "junit" / "cuda.xml").unlink()
    (laptop / "junit" / "cuda.meta.json").unlink()
    paths = write_backend(laptop / "evidence" / "2026-03-01-cuda", "cuda", IDS)
    paths[0].write_text("<testsuites><testsuite")
    (laptop / "evidence" / "2026-03-01-metal").mkdir()
    (laptop / "evidence" / "notes").mkdir()
    result = run_signoff(
        offline_options(laptop, evidence_dir=laptop / "evidence", write=False, require=["cuda"])
    )
    assert result.backends["cuda"].status == Status.INCOMPLETE
    assert any(str(paths[0]) in issue for issue in result.backends["cuda"].issues)
    assert any("unknown backend 'metal'" in error for error in result.errors)
    assert any("notes: not named" in warning for warning in result.warnings)


def test_save_evidence_copies_a_run_for_committing(laptop: Path, capsys) -> None:
    target = save(laptop)
    names = sorted(path.name for path in target.iterdir())
    assert names == [
        "cpu-shard-1-of-2.meta.json",
        "cpu-shard-1-of-2.xml",
        "cpu-shard-2-of-2.meta.json",
        "cpu-shard-2-of-2.xml",
        "versions.json",
    ]
    versions = json.loads((target / "versions.json").read_text())
    assert versions["device"] == "Synthetic CPU" and "synthetic" in versions["source"]
    assert versions["fingerprint"]["files"].keys() == {"backends/cpu.py"}
    with pytest.raises(SignoffInputError, match="never overwritten"):
        save(laptop)
    assert run_cli("--save-evidence", "interpret") == 0
    assert "evidence saved in" in capsys.readouterr().out
    assert run_cli("--save-evidence", "metal") == 2


def test_save_evidence_interrupted_leaves_nothing_behind(laptop: Path, monkeypatch) -> None:
    def disk_full(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(evidence_module, "atomic_write_text", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save(laptop)
    assert list((laptop / "evidence").iterdir()) == [], "a half-written evidence folder is left"


def test_reports_are_written_with_the_umask_not_0600(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "signoff.md", "verdict\n")
    finally:
        os.umask(mask)
    assert (tmp_path / "signoff.md").stat().st_mode & 0o777 == 0o644


# --- real pytest output ---------------------------------------------------------------------


CONFORMANCE_TESTS = """
import pytest

@pytest.mark.parametrize("n", range(5))
def test_plan(n, record_property):
    record_property("max_abs_err", n * 1e-4)

@pytest.mark.xfail(reason="known", strict=True)
def test_known():
    assert 0
"""


def test_reports_written_by_pytest_and_the_plugin_sign_off(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(**{"tests/conformance/test_persistent": CONFORMANCE_TESTS})
    expectations = pytester.path / "expectations"
    expectations.mkdir()
    (expectations / "cpu.txt").write_text(
        "xfail: tests/conformance/test_persistent.py::test_known  # known\n"
    )
    junit = pytester.path / "reports" / "junit"
    for index in (1, 2):
        pytester.runpytest(
            "-p", "conformance.harness.reporting", "-p", "no:cacheprovider",
            f"--shard={index}/2", f"--junitxml={junit}/cpu-shard-{index}-of-2.xml",
            f"--expectations-dir={expectations}",
        )  # fmt: skip
    sidecar = json.loads((junit / "cpu-shard-1-of-2.meta.json").read_text())
    assert sidecar["junit_sha256"] == sha256_of(junit / "cpu-shard-1-of-2.xml")
    result = run_signoff(offline_options(pytester.path / "reports", expectations_dir=expectations))
    cpu = result.backends["cpu"]
    assert (result.verdict, cpu.status) == (Verdict.PASS, Status.PASS), cpu.issues
    assert cpu.completeness.expected_count == 6
    assert {case.outcome.value for case in cpu.cases} == {"passed", "xfail"}
    (case,) = [case for case in cpu.cases if case.node_id.endswith("test_plan[3]")]
    assert float(case.properties["max_abs_err"]) == pytest.approx(3e-4)
    assert case.family == "persistent"
    (junit / "cpu-shard-1-of-2.xml").unlink()
    again = run_signoff(
        offline_options(pytester.path / "reports", write=False, expectations_dir=expectations)
    )
    assert again.verdict == Verdict.INCOMPLETE
    assert any("cpu-shard-1-of-2.xml is missing" in issue for issue in again.backends["cpu"].issues)


def test_collect_lists_the_ids_pytest_would_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**{"tests/conformance/test_persistent": CONFORMANCE_TESTS})
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               "tests/conformance"]  # fmt: skip
    ids = collect_ids("cpu", root=pytester.path, command=command)
    assert ids == [f"tests/conformance/test_persistent.py::test_plan[{n}]" for n in range(5)] + [
        "tests/conformance/test_persistent.py::test_known"
    ]
    with pytest.raises(SignoffInputError, match="collecting cpu failed"):
        collect_ids("cpu", root=pytester.path, command=[*command, "--no-such-option"])


def test_collect_output_stops_at_the_summary() -> None:
    output = "a.py::t[0]\na.py::t[1]\n\n== warnings summary ==\na.py::t[0]\n  Warning\n"
    assert parse_collect_output(output) == ["a.py::t[0]", "a.py::t[1]"]
