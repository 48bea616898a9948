"""Classification: xfail vs skip, explained vs unexplained skips, unavailable backends, failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.applicability import Declaration, case_facts_table
from conformance.signoff.engine import run_signoff
from conformance.signoff.loading import family_of_node_id, node_id_from_junit
from conformance.signoff.model import Outcome, Status, Verdict

from synthetic_reports import (
    SyntheticCase,
    junit_xml,
    node_ids,
    offline_options,
    sha256_of,
    sidecar_document,
    write_backend,
)

IDS = node_ids("metadata", 6) + node_ids("persistent", 4)
CASES = list(case_facts_table())
PLAN_FREE = Declaration("cpu", plan_format=None)
FIRST, SECOND = IDS[0], IDS[7]


@pytest.fixture
def expectations(tmp_path: Path) -> Path:
    directory = tmp_path / "expectations"
    directory.mkdir()
    return directory


def sign(tmp_path: Path, expectations: Path, **changes):
    options = offline_options(
        tmp_path / "reports",
        write=False,
        expectations_dir=expectations,
        declarations={"cpu": PLAN_FREE},
        **changes,
    )
    return run_signoff(options)


def outcome_of(result, node_id: str, backend: str = "cpu") -> Outcome:
    (case,) = [case for case in result.backends[backend].cases if case.node_id == node_id]
    return case.outcome


def write(tmp_path: Path, backend: str = "cpu", **kwargs) -> None:
    write_backend(tmp_path / "reports" / "junit", backend, IDS, **kwargs)


def test_xfail_is_counted_apart_from_skips_and_passes(tmp_path: Path, expectations) -> None:
    message = "expected failure (cpu.txt:1): known defect"  # the plugin's mark of an entry
    write(tmp_path, outcomes={FIRST: "xfail"}, messages={FIRST: message})
    xml = (tmp_path / "reports" / "junit" / "cpu.xml").read_text()
    assert f'<skipped type="pytest.xfail" message="{message}"' in xml
    result = sign(tmp_path, expectations)
    assert outcome_of(result, FIRST) == Outcome.XFAIL
    assert result.backends["cpu"].status == Status.PASS
    assert result.verdict == Verdict.PASS


def test_an_unexplained_skip_blocks_the_pass(tmp_path: Path, expectations) -> None:
    write(tmp_path, outcomes={FIRST: "skipped"}, messages={FIRST: "no fp8 here"})
    result = sign(tmp_path, expectations)
    assert outcome_of(result, FIRST) == Outcome.SKIPPED
    cpu = result.backends["cpu"]
    assert cpu.status == Status.INCOMPLETE
    assert "1 unexplained skips" in cpu.reason
    assert "conformance/expectations/cpu.txt" in cpu.reason
    assert result.verdict == Verdict.INCOMPLETE


@pytest.mark.parametrize(
    ("entry", "outcome", "message", "expected", "verdict"),
    [
        ("skip: {id}  # hangs", "skipped", "something", Outcome.EXPECTED_SKIP, Verdict.PASS),
        ("", "skipped", "expected skip (cpu.txt:4): hangs", Outcome.EXPECTED_SKIP, Verdict.PASS),
        ("{id}  # planner ignores kv dtype", "failed", "boom", Outcome.XFAIL, Verdict.PASS),
        ("{id}  # was broken", "failed", "[XPASS(strict)] expected failure (cpu.txt:1): was broken",
         Outcome.FAILED, Verdict.FAIL),
        ("xfail: {id}  # known defect", "xfail", "flaky on Tuesdays", Outcome.XFAIL, Verdict.PASS),
    ],
    ids=["listed-skip", "plugin-marked-skip", "listed-failure", "strict-xpass", "listed-xfail"],
)  # fmt: skip
def test_an_expectation_entry_explains_what_it_lists(
    tmp_path: Path, expectations, entry, outcome, message, expected, verdict
) -> None:
    if entry:
        (expectations / "cpu.txt").write_text(entry.format(id=FIRST) + "\n")
    write(tmp_path, outcomes={FIRST: outcome}, messages={FIRST: message})
    result = sign(tmp_path, expectations)
    assert (outcome_of(result, FIRST), result.verdict) == (expected, verdict)


def test_an_unavailable_backend_is_not_run_with_its_reason(tmp_path: Path, expectations) -> None:
    reason = "backend cuda unavailable: torch.cuda.is_available() is False"
    write(
        tmp_path,
        backend="cuda",
        outcomes={node_id: "skipped" for node_id in IDS},
        messages={node_id: reason for node_id in IDS},
    )
    write(tmp_path)
    result = sign(tmp_path, expectations)
    cuda = result.backends["cuda"]
    assert cuda.status == Status.NOT_RUN
    assert cuda.reason == "torch.cuda.is_available() is False"
    assert result.verdict == Verdict.PASS, "cuda is not required on this machine"
    required = sign(tmp_path, expectations, require=["cpu", "cuda"])
    assert required.verdict == Verdict.INCOMPLETE
    assert "cuda: required but not run: torch.cuda.is_available() is False" in required.blocking


def test_a_partly_unavailable_backend_is_suspicious(tmp_path: Path, expectations) -> None:
    reason = "backend cpu unavailable: flaky probe"
    write(tmp_path, outcomes={FIRST: "skipped"}, messages={FIRST: reason})
    result = sign(tmp_path, expectations)
    assert outcome_of(result, FIRST) == Outcome.UNAVAILABLE
    assert result.backends["cpu"].status == Status.INCOMPLETE


@pytest.mark.parametrize("outcome", ["failed", "error"])
def test_failures_and_errors_fail_and_outrank_incompleteness(
    tmp_path: Path, expectations, outcome: str
) -> None:
    write(
        tmp_path,
        outcomes={FIRST: outcome, SECOND: "skipped"},
        messages={FIRST: "max_abs_err 0.3 > atol 0.013"},
    )
    result = sign(tmp_path, expectations)
    cpu = result.backends["cpu"]
    assert cpu.status == Status.FAIL
    assert result.verdict == Verdict.FAIL
    assert result.verdict.exit_code == 1
    (case,) = [case for case in cpu.cases if case.node_id == FIRST]
    assert case.message == "max_abs_err 0.3 > atol 0.013"


def test_a_listed_test_that_passes_is_warned(tmp_path: Path, expectations) -> None:
    (expectations / "cpu.txt").write_text(f"{FIRST}  # was broken\n")
    write(tmp_path)
    cpu = sign(tmp_path, expectations).backends["cpu"]
    assert any(FIRST in w and "expects it to fail; remove the entry" in w for w in cpu.warnings)


def test_stale_expectations_are_listed(tmp_path: Path, expectations) -> None:
    (expectations / "cpu.txt").write_text("# x\ntests/conformance/test_gone.py  # renamed\n")
    write(tmp_path)
    result = sign(tmp_path, expectations)
    assert result.backends["cpu"].stale_expectations == [
        "cpu.txt:2: tests/conformance/test_gone.py"
    ]
    assert result.verdict == Verdict.PASS, "stale entries warn, they do not block"


def test_a_malformed_expectation_file_blocks_the_pass(tmp_path: Path, expectations) -> None:
    (expectations / "cpu.txt").write_text(f"{FIRST}\n")
    write(tmp_path)
    result = sign(tmp_path, expectations)
    assert result.verdict == Verdict.INCOMPLETE
    assert any("cpu.txt:1: entry" in error and "has no reason" in error for error in result.errors)


def test_a_teardown_error_on_a_failed_test_is_one_case(tmp_path: Path, expectations) -> None:
    """pytest writes the teardown error as a second <testcase> of the same id."""
    junit = tmp_path / "reports" / "junit"
    junit.mkdir(parents=True)
    cases = [SyntheticCase(node_id) for node_id in IDS[1:]]
    cases += [SyntheticCase(FIRST, "failed", "assert 0"), SyntheticCase(FIRST, "error", "td")]
    (junit / "cpu.xml").write_text(junit_xml(cases))
    document = sidecar_document("cpu", None, collected=IDS, selected=IDS)
    (junit / "cpu.meta.json").write_text(json.dumps(document))
    result = sign(tmp_path, expectations)
    cpu = result.backends["cpu"]
    assert cpu.completeness.duplicates == {}
    assert len(cpu.cases) == len(IDS)
    (case,) = [case for case in cpu.cases if case.node_id == FIRST]
    assert case.outcome == Outcome.ERROR
    assert "assert 0" in case.message and "td" in case.message


def test_ids_are_rebuilt_when_the_nodeid_property_is_absent(tmp_path: Path, expectations) -> None:
    junit = tmp_path / "reports" / "junit"
    junit.mkdir(parents=True)
    cases = [SyntheticCase(node_id) for node_id in IDS]
    (junit / "cpu.xml").write_text(junit_xml(cases, record_node_ids=False))
    digest = sha256_of(junit / "cpu.xml")
    document = sidecar_document("cpu", None, collected=IDS, selected=IDS, junit_sha256=digest)
    (junit / "cpu.meta.json").write_text(json.dumps(document))
    result = sign(tmp_path, expectations)
    assert result.verdict == Verdict.PASS
    families = {case.family for case in result.backends["cpu"].cases}
    assert families == {"metadata", "persistent"}


@pytest.mark.parametrize(
    ("classname", "name", "node_id"),
    [
        (
            "tests.conformance.test_stubs",
            "test_a[x-1]",
            "tests/conformance/test_stubs.py::test_a[x-1]",
        ),
        (
            "tests.conformance.test_stubs.TestB",
            "test_c",
            "tests/conformance/test_stubs.py::TestB::test_c",
        ),
        ("", "tests.conformance.test_stubs", "tests.conformance.test_stubs"),
    ],
)
def test_node_id_from_junit(classname: str, name: str, node_id: str) -> None:
    assert node_id_from_junit(classname, name) == node_id


@pytest.mark.parametrize(
    ("node_id", "family"),
    [
        ("tests/conformance/test_persistent.py::test_plan[a]", "persistent"),
        ("tests/conformance/test_stubs.py", "stubs"),
        ("tests.conformance.test_stubs", "other"),
    ],
)
def test_family_is_the_module_name_minus_test(node_id: str, family: str) -> None:
    assert family_of_node_id(node_id) == family


# --- unexplained means unexplained; not applicable is its own outcome ------------------------


@pytest.mark.parametrize("reason", ["", "Skipped", "unconditional skip", "  "])
def test_a_skip_without_a_reason_is_unexplained(tmp_path: Path, expectations, reason) -> None:
    (expectations / "cpu.txt").write_text(f"skip: {FIRST}  # listed, yet it skipped itself\n")
    write(tmp_path, outcomes={FIRST: "skipped"}, messages={FIRST: reason})
    result = sign(tmp_path, expectations)
    assert outcome_of(result, FIRST) == Outcome.SKIPPED
    assert result.backends["cpu"].status == Status.INCOMPLETE
    assert "skipped with no reason" in result.backends["cpu"].reason


def test_an_xfail_without_an_expectation_entry_is_unexplained(tmp_path: Path, expectations) -> None:
    """A conformance test calling ``pytest.xfail()`` on its own cannot pass a release."""
    write(tmp_path, outcomes={FIRST: "xfail"}, messages={FIRST: "flaky on Tuesdays"})
    result = sign(tmp_path, expectations, release=True, no_collect=True)
    assert outcome_of(result, FIRST) == Outcome.SKIPPED
    assert result.backends["cpu"].status == Status.INCOMPLETE
    assert "xfail with no expectation entry: flaky on Tuesdays" in result.backends["cpu"].reason


def write_plans_not_applicable(root: Path, count: int, passed: list[str]) -> list[str]:
    """Write cpu's report: `passed` pass, `count` plan cases are skipped as not applicable."""
    plan = [f"tests/conformance/test_plan.py::test_plan_matches_golden[{c}]" for c in CASES[:count]]
    message = "not applicable: cpu declares plan_format=None"
    write_backend(
        root / "reports" / "junit", "cpu", passed + plan, skips=dict.fromkeys(plan, message)
    )
    return plan


def test_not_applicable_is_counted_apart_and_never_blocks(tmp_path: Path, expectations) -> None:
    plan = write_plans_not_applicable(tmp_path, 2, IDS)
    result = sign(tmp_path, expectations, release=True, no_collect=True, require=None)
    cpu = result.backends["cpu"]
    assert outcome_of(result, plan[0]) == Outcome.NOT_APPLICABLE
    assert cpu.status == Status.PASS
    assert cpu.reason == "10 passed, 2 not-applicable"
    assert not any("cpu" in line for line in result.blocking)


def test_not_applicable_without_a_reason_is_unexplained(tmp_path: Path, expectations) -> None:
    write(tmp_path, outcomes={FIRST: "skipped"}, messages={FIRST: "not applicable: "})
    result = sign(tmp_path, expectations)
    assert outcome_of(result, FIRST) == Outcome.SKIPPED
    assert result.backends["cpu"].status == Status.INCOMPLETE


def test_a_backend_where_nothing_applies_or_passes_is_no_pass(tmp_path: Path, expectations) -> None:
    write_plans_not_applicable(tmp_path, 10, [])
    cpu = sign(tmp_path, expectations).backends["cpu"]
    assert (cpu.status, cpu.reason) == (Status.INCOMPLETE, "no test passed (10 not-applicable)")
