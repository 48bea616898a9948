"""Expectation files and the report plugin (marks, shards, sidecar), tested with pytester."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.runs.expectations import (
    DEFAULT_EXPECTATIONS_DIR,
    ExpectationFileError,
    id_matches,
    load_expectations,
    match_expectation,
    parse_expectations,
    stale_entries,
)

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parents[3]
MODULE = "tests/conformance/test_metadata.py"
CONFORMANCE_TESTS = """
import pytest

@pytest.mark.parametrize("n", range(6))
def test_ok(n):
    pass

def test_broken():
    assert 1 == 2, "known defect"

def test_fixed():
    pass
"""


def parse(text: str) -> list:
    return parse_expectations(text, file=Path("cpu.txt"))


# --- the file format ------------------------------------------------------------------------


def test_entries_default_to_strict_xfail_and_keep_their_reason_and_line() -> None:
    entries = parse(f"# header\n\n{MODULE}::test_broken  # vllm#46997\n")
    assert len(entries) == 1
    entry = entries[0]
    assert (entry.kind, entry.pattern, entry.reason, entry.line) == (
        "xfail",
        f"{MODULE}::test_broken",
        "vllm#46997",
        3,
    )
    assert entry.mark_reason() == "expected failure (cpu.txt:3): vllm#46997"


def test_skip_prefix_selects_a_skip() -> None:
    (entry,) = parse(f"skip: {MODULE}::test_ok  # hangs on this device\n")
    assert entry.kind == "skip"
    assert entry.mark_reason().startswith("expected skip (cpu.txt:1)")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (f"{MODULE}::test_broken\n", "cpu.txt:1: entry .* has no reason"),
        (f"\n{MODULE}::test_broken  #   \n", "cpu.txt:2: entry .* has no reason"),
        (f"xfial: {MODULE}::test_broken  # typo\n", "cpu.txt:1: unknown prefix 'xfial:'"),
        ("  # only a comment is fine\n skip:  # no id\n", "cpu.txt:2: entry has no node id"),
        (
            f"{MODULE}::a  # one\n{MODULE}::a  # two\n",
            "cpu.txt:2: entry .* repeats line 1",
        ),
    ],
)
def test_malformed_lines_name_file_and_line(text: str, fragment: str) -> None:
    with pytest.raises(ExpectationFileError, match=fragment):
        parse(text)


@pytest.mark.parametrize(
    ("pattern", "node_id", "expected"),
    [
        (f"{MODULE}::test_ok", f"{MODULE}::test_ok", True),
        (f"{MODULE}::test_ok", f"{MODULE}::test_ok[3]", True),
        (f"{MODULE}::test_ok", f"{MODULE}::test_okay", False),
        (MODULE, f"{MODULE}::test_ok[3]", True),
        ("tests/conformance", f"{MODULE}::test_ok", True),
        ("tests/conformance/", f"{MODULE}::test_ok", True),
        ("tests/conf", f"{MODULE}::test_ok", False),
        (f"{MODULE}::TestX", f"{MODULE}::TestX::test_y", True),
    ],
)
def test_prefixes_match_only_at_a_boundary(pattern: str, node_id: str, expected: bool) -> None:
    assert id_matches(pattern, node_id) is expected


def test_the_most_specific_entry_wins() -> None:
    entries = parse(f"{MODULE}  # whole module\nskip: {MODULE}::test_ok[2]  # this one hangs\n")
    assert match_expectation(entries, f"{MODULE}::test_ok[2]").kind == "skip"
    assert match_expectation(entries, f"{MODULE}::test_ok[1]").kind == "xfail"
    assert match_expectation(entries, "tests/conformance/test_stubs.py::t") is None


def test_stale_entries_are_those_matching_nothing() -> None:
    entries = parse(f"{MODULE}::test_ok  # a\n{MODULE}::test_gone  # b\n")
    stale = stale_entries(entries, [f"{MODULE}::test_ok[0]"])
    assert [entry.pattern for entry in stale] == [f"{MODULE}::test_gone"]


def test_a_backend_without_a_file_has_no_expectations(tmp_path: Path) -> None:
    assert load_expectations(tmp_path / "nothing.txt") == []


@pytest.mark.parametrize("backend", ["cpu", "cuda", "rocm", "interpret"])
def test_committed_expectation_files_parse_and_document_the_format(backend: str) -> None:
    path = DEFAULT_EXPECTATIONS_DIR / f"{backend}.txt"
    text = path.read_text(encoding="utf-8")
    assert "xfail:" in text and "skip:" in text, "the header documents both prefixes"
    load_expectations(path)  # raises on a malformed line


# --- the plugin -----------------------------------------------------------------------------


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """A tmp project with tests/conformance/test_metadata.py and an expectations dir."""
    pytester.makepyfile(**{"tests/conformance/test_metadata": CONFORMANCE_TESTS})
    (pytester.path / "expectations").mkdir()
    return pytester


def write_expectations(pytester: pytest.Pytester, text: str, backend: str = "cpu") -> None:
    (pytester.path / "expectations" / f"{backend}.txt").write_text(text, encoding="utf-8")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "-p", "conformance.harness.reporting", "-p", "no:cacheprovider",
        "--expectations-dir", "expectations", *args,
    )  # fmt: skip


def test_plugin_applies_xfail_and_skip_entries(suite: pytest.Pytester) -> None:
    write_expectations(
        suite,
        f"{MODULE}::test_broken  # known defect\nskip: {MODULE}::test_ok[2]  # hangs\n",
    )
    result = run(suite, "-rsx")
    result.assert_outcomes(passed=6, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["*expected skip (cpu.txt:2): hangs*"])


def test_an_xfail_entry_on_a_passing_test_fails_the_run(suite: pytest.Pytester) -> None:
    write_expectations(suite, f"{MODULE}::test_fixed  # was broken\n")
    result = run(suite)
    result.assert_outcomes(passed=6, failed=2)  # test_broken really fails; test_fixed XPASSes
    result.stdout.fnmatch_lines(["*XPASS(strict)*expected failure (cpu.txt:1): was broken*"])


def test_a_prefix_entry_covers_every_parameter(suite: pytest.Pytester) -> None:
    write_expectations(suite, f"skip: {MODULE}::test_ok  # whole function\n")
    run(suite).assert_outcomes(passed=1, failed=1, skipped=6)


def test_stale_entries_are_warned_with_file_and_line(suite: pytest.Pytester) -> None:
    write_expectations(suite, f"# header\n{MODULE}::test_renamed  # gone\n")
    result = run(suite)
    result.stdout.fnmatch_lines(
        ["*StaleExpectationWarning*cpu.txt:2*test_renamed*matches no collected test*"]
    )


def test_an_entry_without_reason_stops_the_run_naming_file_and_line(
    suite: pytest.Pytester,
) -> None:
    write_expectations(suite, f"\n\n{MODULE}::test_broken\n")
    result = run(suite)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cpu.txt:3: entry*has no reason*"])


def test_the_backend_chooses_the_file(suite: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", "rocm")
    write_expectations(suite, f"{MODULE}::test_broken  # cpu only\n", backend="cpu")
    write_expectations(suite, f"skip: {MODULE}  # rocm cannot\n", backend="rocm")
    run(suite).assert_outcomes(skipped=8)


def test_plugin_is_inert_outside_conformance_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_selftest="def test_a():\n    pass\n")
    (pytester.path / "expectations").mkdir()
    write_expectations(pytester, "tests/conformance/test_metadata.py::x  # stale\n")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    assert "StaleExpectation" not in result.stdout.str()
    assert not list(pytester.path.rglob("*.meta.json"))


def test_shards_split_the_run_and_say_so(suite: pytest.Pytester) -> None:
    seen = 0
    for index in (1, 2, 3):
        result = run(suite, f"--shard={index}/3", "-q")
        outcomes = result.parseoutcomes()
        ran = outcomes.get("passed", 0) + outcomes.get("failed", 0)
        result.stdout.fnmatch_lines([f"shard {index}/3 (hash): running {ran} of 8 items"])
        seen += ran
    assert seen == 8


@pytest.mark.parametrize("value", ["0/2", "3/2", "half"])
def test_a_bad_shard_is_a_usage_error(suite: pytest.Pytester, value: str) -> None:
    result = run(suite, f"--shard={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--shard: shard '{value}'*"])


def test_sidecar_and_junit_describe_the_run(suite: pytest.Pytester) -> None:
    junit = suite.path / "reports" / "junit" / "cpu-shard-1-of-2.xml"
    run(suite, "--shard=1/2", f"--junitxml={junit}")
    sidecar = json.loads(junit.with_name("cpu-shard-1-of-2.meta.json").read_text())
    assert sidecar["format"] == "mla-conformance-run/1"
    assert (sidecar["backend"], sidecar["shard"], sidecar["junit"]) == (
        "cpu",
        "1/2",
        junit.name,
    )
    assert len(sidecar["collected_ids"]) == 8
    assert set(sidecar["selected_ids"]) < set(sidecar["collected_ids"])
    assert sidecar["finished"] is True and sidecar["exitstatus"] in (0, 1)
    assert sidecar["filtered_out"] == 0
    assert sidecar["versions"]["torch"] and sidecar["python"]
    xml = junit.read_text()
    assert 'testsuite name="mla-cpu"' in xml
    assert f'name="run_id" value="{sidecar["run_id"]}"' in xml
    for node_id in sidecar["selected_ids"]:
        assert f'name="nodeid" value="{node_id}"' in xml


def test_sidecar_records_tests_removed_by_k(suite: pytest.Pytester) -> None:
    junit = suite.path / "reports" / "junit" / "cpu.xml"
    run(suite, "-k", "not broken", f"--junitxml={junit}")
    assert not junit.exists(), "a partial run never writes the full report's file"
    sidecar = json.loads((junit.parent / "partial" / "cpu.meta.json").read_text())
    assert (sidecar["selection"], sidecar["selection_reason"]) == ("partial", "-k not broken")
    assert sidecar["filtered_out"] == 1
    assert len(sidecar["collected_ids"]) == 7


def test_under_xdist_only_the_controller_writes_the_sidecar(
    suite: pytest.Pytester, monkeypatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    junit = suite.path / "reports" / "junit" / "cpu-shard-2-of-2.xml"
    result = suite.runpytest_subprocess(
        "-p", "conformance.harness.reporting", "-p", "no:cacheprovider", "-n", "2",
        "--expectations-dir", "expectations", "--shard=2/2", f"--junitxml={junit}",
    )  # fmt: skip
    sidecars = list(suite.path.rglob("*.meta.json"))
    assert sidecars == [junit.with_name("cpu-shard-2-of-2.meta.json")], result.stdout.str()
    sidecar = json.loads(sidecars[0].read_text())
    assert sidecar["xdist_workers"] == 2
    assert len(sidecar["collected_ids"]) == 8
    xml = junit.read_text()
    assert sorted(sidecar["selected_ids"]) == sorted(
        node_id for node_id in sidecar["collected_ids"] if f'value="{node_id}"' in xml
    )
    result.stdout.fnmatch_lines([f"shard 2/2: ran {len(sidecar['selected_ids'])} of 8 items"])
