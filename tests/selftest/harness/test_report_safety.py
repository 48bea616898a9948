"""Bad arguments never touch reports; partial runs never supersede full ones; shards balance.

Each bad invocation must end as a one-line usage error, with no traceback, before any report
moves. Runs in a subprocess, so stderr is what a user sees.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
TESTS = """
import pytest

@pytest.mark.parametrize("n", range(6))
def test_case(n):
    pass

def test_heavy():
    pass
"""
EXISTING = ("cpu.xml", "cpu.meta.json", "cpu-shard-1-of-2.xml")


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A tmp project with conformance tests and earlier cpu reports in reports/junit/."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.delenv("MLA_GPU_COUNT", raising=False)
    pytester.makepyfile(**{"tests/conformance/test_metadata": TESTS})
    junit = pytester.path / "reports" / "junit"
    junit.mkdir(parents=True)
    for name in EXISTING:
        (junit / name).write_text(f"earlier {name}\n", encoding="utf-8")
    return pytester


def run(project: pytest.Pytester, *args: str, plugin: str = "reporting") -> pytest.RunResult:
    return project.runpytest_subprocess(
        "-p", f"conformance.harness.{plugin}", "-p", "no:cacheprovider", *args,
    )  # fmt: skip


def untouched(project: pytest.Pytester) -> bool:
    junit = project.path / "reports" / "junit"
    return not (project.path / "reports" / "previous").exists() and all(
        (junit / name).read_text(encoding="utf-8") == f"earlier {name}\n" for name in EXISTING
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--shard=4/3"], {}, "--shard: shard '4/3': the index I must be between 1 and 3"),
        (["--shard=abc"], {}, "--shard: shard 'abc' is not of the form I/N"),
        (["--shard=0/0"], {}, "--shard: shard '0/0': the count N must be at least 1"),
        ([], {"MLA_GPU_COUNT": "abc"}, "MLA_GPU_COUNT='abc': expected a whole number of GPUs"),
        (["--shard=1/2", "--shard-durations=nope.json"], {}, "--shard-durations: nope.json"),
    ],
)
def test_a_bad_invocation_is_one_line_and_moves_no_report(
    project: pytest.Pytester, monkeypatch, args: list[str], env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = run(project, *args, "--junitxml=reports/junit/cpu.xml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and message in errors[0], result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert untouched(project)


def test_an_unknown_backend_is_one_line_and_moves_no_report(project: pytest.Pytester) -> None:
    junit = "--junitxml=reports/junit/nosuch.xml"
    result = run(project, "--backend=nosuch", junit, plugin="plugin")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and "unknown backend 'nosuch'; known backends: cpu" in errors[0], errors
    assert untouched(project)


def test_a_full_run_moves_what_it_supersedes(project: pytest.Pytester) -> None:
    result = run(project, "--junitxml=reports/junit/cpu.xml")
    assert result.ret == 0
    (moved,) = (project.path / "reports" / "previous").iterdir()
    assert sorted(path.name for path in moved.iterdir()) == sorted(EXISTING)
    sidecar = json.loads((project.path / "reports/junit/cpu.meta.json").read_text())
    assert (sidecar["selection"], sidecar["selection_reason"]) == ("full", None)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["-k", "heavy"], "-k heavy"),
        (["-m", "not slow"], "-m not slow"),
        (["--deselect", "tests/conformance/test_metadata.py::test_heavy"], "--deselect"),
        (["tests/conformance/test_metadata.py::test_heavy"], "selected tests/conformance/"),
    ],
)
def test_a_partial_run_supersedes_nothing_and_says_so(
    project: pytest.Pytester, args: list[str], reason: str
) -> None:
    result = run(project, *args, "--junitxml=reports/junit/cpu.xml")
    assert result.ret == 0, result.stdout.str()
    assert untouched(project)
    partial = project.path / "reports" / "junit" / "partial"
    assert (partial / "cpu.xml").is_file()
    sidecar = json.loads((partial / "cpu.meta.json").read_text())
    assert sidecar["selection"] == "partial" and reason in sidecar["selection_reason"]


def test_naming_the_whole_conformance_set_is_a_full_run(project: pytest.Pytester) -> None:
    result = run(project, "tests/conformance", "--junitxml=reports/junit/cpu.xml")
    assert result.ret == 0
    assert (
        json.loads((project.path / "reports/junit/cpu.meta.json").read_text())["selection"]
        == "full"
    )


MODULE = "tests/conformance/test_metadata.py"


def shards_by_durations(project: pytest.Pytester, durations: dict[str, float]) -> list[list[str]]:
    """The ids each of two shards ran, balanced by `durations` (the sidecars say so)."""
    pytest.importorskip("pytest_split")
    (project.path / ".test_durations").write_text(json.dumps(durations))
    selected = []
    for index in (1, 2):
        junit = f"reports/junit/cpu-shard-{index}-of-2.xml"
        assert run(project, f"--shard={index}/2", f"--junitxml={junit}").ret == 0
        sidecar = json.loads((project.path / junit.replace(".xml", ".meta.json")).read_text())
        assert sidecar["shard_algorithm"] == "durations"
        selected.append(sidecar["selected_ids"])
    return selected


def test_shards_balance_by_recorded_durations(project: pytest.Pytester) -> None:
    module = MODULE
    durations = {f"{module}::test_case[{n}]": 1.0 for n in range(6)}
    durations[f"{module}::test_heavy"] = 6.0
    selected = shards_by_durations(project, durations)
    heavy_shard = next(ids for ids in selected if f"{module}::test_heavy" in ids)
    assert heavy_shard == [f"{module}::test_heavy"], "6 s alone balances six 1 s cases"
    assert sorted(selected[0] + selected[1]) == sorted(durations)


def test_shards_run_the_ids_the_durations_file_lacks(project: pytest.Pytester) -> None:
    """A durations file older than the tests (test_heavy and two cases not in it) still
    gives every collected test to one shard."""
    module = MODULE
    durations = {f"{module}::test_case[{n}]": 1.0 for n in range(4)}
    durations[f"{module}::test_removed"] = 3.0
    first, second = shards_by_durations(project, durations)
    everything = [f"{module}::test_case[{n}]" for n in range(6)] + [f"{module}::test_heavy"]
    assert sorted(first + second) == sorted(everything)


def test_without_durations_shards_fall_back_to_the_hash(project: pytest.Pytester) -> None:
    result = run(project, "--shard=1/2", "--junitxml=reports/junit/cpu-shard-1-of-2.xml")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["shard 1/2 (hash): running * of 7 items"])


SIGNOFF_OUTPUTS = ("signoff.md", "signoff.json", "signoff.html", "conformance.xml")


def _write_signoff(project: pytest.Pytester) -> None:
    for name in SIGNOFF_OUTPUTS:
        (project.path / "reports" / name).write_text(f"verdict over earlier {name}\n")


def test_a_full_run_moves_the_signoff_of_the_reports_it_supersedes(
    project: pytest.Pytester,
) -> None:
    _write_signoff(project)
    assert run(project, "--junitxml=reports/junit/cpu.xml").ret == 0
    (moved,) = (project.path / "reports" / "previous").iterdir()
    assert sorted(path.name for path in moved.iterdir()) == sorted(EXISTING + SIGNOFF_OUTPUTS)
    assert not any((project.path / "reports" / name).exists() for name in SIGNOFF_OUTPUTS)
    assert (moved / "signoff.md").read_text() == "verdict over earlier signoff.md\n"


def test_a_first_run_of_a_backend_still_moves_the_old_signoff(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_signoff(project)
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", "interpret")
    assert run(project, "--junitxml=reports/junit/interpret.xml").ret == 0
    (moved,) = (project.path / "reports" / "previous").iterdir()
    assert sorted(path.name for path in moved.iterdir()) == sorted(SIGNOFF_OUTPUTS)
    assert (project.path / "reports" / "junit" / "cpu.xml").exists(), "cpu is not superseded"


def test_a_partial_run_leaves_the_signoff_standing(project: pytest.Pytester) -> None:
    _write_signoff(project)
    assert run(project, "-k", "heavy", "--junitxml=reports/junit/cpu.xml").ret == 0
    assert untouched(project)
    assert all((project.path / "reports" / name).is_file() for name in SIGNOFF_OUTPUTS)
