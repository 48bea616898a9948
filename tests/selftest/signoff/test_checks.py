"""The sign-off's checks: every code has a negative control, the docs list exactly the
checks, every issue in the outputs carries its code, and a code is written once (its `Check`)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.applicability import Declaration, case_facts_table, not_applicable
from conformance.signoff.checks import CHECKS
from conformance.signoff.engine import SignoffOptions, run_signoff
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.evidence import VERSIONS_FILE
from conformance.signoff.machine import StaticView
from conformance.signoff.report_html import render_html
from conformance.signoff.report_json import signoff_document
from conformance.signoff.report_md import render_markdown

from doc_lists import listed_rules
from synthetic_reports import (
    SyntheticCase,
    edit_sidecar,
    junit_xml,
    node_ids,
    offline_options,
    rewrite_junit,
    sha256_of,
    write_backend,
)

REPO = Path(__file__).resolve().parents[3]
IDS = node_ids("metadata", 6)
FP8_CASES = [c.id for c in case_facts_table().values() if c.kv_dtype != "bf16"][:3]
NUMERICS = [
    f"tests/conformance/test_numerics.py::test_decode_matches_golden[{c}]" for c in FP8_CASES
]
PLAN = [f"tests/conformance/test_plan.py::test_plan_matches_golden[{c}]" for c in FP8_CASES]
TAKES_ALL = Declaration("cpu", "aiter-v1", ("bf16", "e4m3fn", "e4m3fnuz"), ("bf16", "e4m3fn"))
BF16_ONLY = Declaration("cpu")


def junit(reports: Path) -> Path:
    return reports / "junit"


def sidecar(reports: Path, name: str = "cpu") -> Path:
    return junit(reports) / f"{name}.meta.json"


def options(
    reports: Path, declaration: Declaration = TAKES_ALL, **changes: object
) -> SignoffOptions:
    settings = {"write": False, "expectations_dir": reports / "expectations", **changes}
    return offline_options(reports, declarations={"cpu": declaration}, **settings)


def sign(reports: Path, **changes: object) -> dict:
    return signoff_document(run_signoff(options(reports, **changes)))


def codes_in(document: dict) -> set[str]:
    codes = [*document["blocking_codes"], *document["error_codes"]]
    for backend in document["backends"]:
        codes += [backend["code"], *backend["issue_codes"]]
    return {code for code in codes if code}


# --- one negative control per code ------------------------------------------------------------


def unreadable_report(reports: Path) -> dict:
    junit(reports).mkdir(parents=True)
    (junit(reports) / "cpu.xml").write_text("<testsuites><testsuite")
    return sign(reports)


def disagreeing_claims(reports: Path) -> dict:
    (path,) = write_backend(junit(reports), "cpu", IDS)
    path.write_text(path.read_text().replace('tests="6"', 'tests="7"'))
    return sign(reports)


def missing_shard(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS, shards=2)
    for name in ("cpu-shard-2-of-2.xml", "cpu-shard-2-of-2.meta.json"):
        (junit(reports) / name).unlink()
    return sign(reports)


def unfinished_run(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)
    edit_sidecar(sidecar(reports), finished=False)
    return sign(reports)


def different_collections(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS, shards=2)
    edit_sidecar(sidecar(reports, "cpu-shard-2-of-2"), collected_ids=[*IDS, "extra::test"])
    return sign(reports)


def duplicated_ids(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS, shards=2)
    second = junit(reports) / "cpu-shard-2-of-2.xml"
    rewrite_junit(second, junit_xml([SyntheticCase(node_id) for node_id in IDS]))
    return sign(reports)


def missing_ids(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)
    edit_sidecar(sidecar(reports), collected_ids=[*IDS, node_ids("metadata", 7)[-1]])
    return sign(reports)


def uncollected_ids(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)
    edit_sidecar(sidecar(reports), collected_ids=IDS[:-1], selected_ids=IDS[:-1])
    return sign(reports)


def skipped_as_bf16_only(reports: Path, skipped: list[str], passed: list[str]) -> None:
    """cpu's report: `passed` pass, `skipped` skip with a bf16-only declaration's reasons."""
    reasons = {node_id: not_applicable(BF16_ONLY, node_id) or "" for node_id in skipped}
    write_backend(junit(reports), "cpu", passed + skipped, skips=reasons)


def self_declared_not_applicable(reports: Path) -> dict:
    """The backend declares fp8 KV yet its run calls the fp8 cases not applicable."""
    skipped_as_bf16_only(reports, NUMERICS, IDS)
    return sign(reports, declaration=TAKES_ALL)


def failed_test(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS, outcomes={IDS[0]: "failed"})
    return sign(reports)


def stale_evidence(reports: Path) -> dict:
    directory = reports / "evidence" / "2026-01-01-cpu"
    write_backend(directory, "cpu", IDS)
    (directory / VERSIONS_FILE).write_text(json.dumps({"backend": "cpu"}))
    return sign(reports, evidence_dir=reports / "evidence", root=REPO)


def unexplained_skip(reports: Path) -> dict:
    write_backend(
        junit(reports), "cpu", IDS, outcomes={IDS[0]: "skipped"}, messages={IDS[0]: "no fp8"}
    )
    return sign(reports)


def nothing_passed(reports: Path) -> dict:
    skipped_as_bf16_only(reports, PLAN, [])
    return sign(reports, declaration=BF16_ONLY)


def numerics_never_ran(reports: Path) -> dict:
    skipped_as_bf16_only(reports, NUMERICS, IDS)
    return sign(reports, declaration=BF16_ONLY)


def required_not_run(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)
    return sign(reports, require=["cuda"])


def unknown_backend(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)
    (junit(reports) / "metal.xml").write_text(junit_xml([SyntheticCase(IDS[0])]))
    return sign(reports)


def bad_evidence_directory(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)
    write_backend(reports / "evidence" / "2026-13-45-cuda", "cuda", IDS)
    return sign(reports, evidence_dir=reports / "evidence")


def broken_expectation_file(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)
    (reports / "expectations").mkdir()
    (reports / "expectations" / "cpu.txt").write_text("frobnicate: tests/x.py  # ?\n")
    return sign(reports)


def failed_collection(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)

    def collector(backend: str) -> list[str]:
        raise SignoffInputError(Path("tests/conformance"), f"no {backend} ids: collection failed")

    return sign(reports, collect=True, collector=collector)


def unjudgeable_reports(reports: Path) -> dict:
    class BrokenView(StaticView):
        def device_kind(self, backend: str) -> str | None:
            raise ValueError(f"no device kind for {backend}")

    write_backend(junit(reports), "cpu", IDS)
    view = BrokenView(names=("cpu",), runnable_names=("cpu",), declarations={"cpu": TAKES_ALL})
    return signoff_document(run_signoff(options(reports, backends=view)))


def declaration_changed_since_the_run(reports: Path) -> dict:
    write_backend(junit(reports), "cpu", IDS)
    edit_sidecar(sidecar(reports), declaration=BF16_ONLY.to_json())
    return sign(reports, declaration=TAKES_ALL)


def private_expectations(reports: Path) -> dict:
    """A built-in backend run with an expectation file that is not the repository's."""
    private = reports / "private" / "cpu.txt"
    private.parent.mkdir(parents=True)
    private.write_text("skip: tests/conformance/test_metadata.py  # not today\n")
    write_backend(junit(reports), "cpu", IDS)
    edit_sidecar(
        sidecar(reports), expectations_file=str(private), expectations_sha256=sha256_of(private)
    )
    return sign(reports)


CONTROLS: dict[str, Callable[[Path], dict]] = {
    "SIGN001": unreadable_report,
    "SIGN002": disagreeing_claims,
    "SIGN003": missing_shard,
    "SIGN004": unfinished_run,
    "SIGN005": different_collections,
    "SIGN006": duplicated_ids,
    "SIGN007": missing_ids,
    "SIGN008": uncollected_ids,
    "SIGN009": self_declared_not_applicable,
    "SIGN010": failed_test,
    "SIGN011": stale_evidence,
    "SIGN012": unexplained_skip,
    "SIGN013": nothing_passed,
    "SIGN014": numerics_never_ran,
    "SIGN015": required_not_run,
    "SIGN016": unknown_backend,
    "SIGN017": bad_evidence_directory,
    "SIGN018": broken_expectation_file,
    "SIGN019": failed_collection,
    "SIGN020": unjudgeable_reports,
    "SIGN021": declaration_changed_since_the_run,
    "SIGN022": private_expectations,
}


def test_every_check_has_a_negative_control() -> None:
    assert list(CONTROLS) == list(CHECKS)


@pytest.mark.parametrize("code", list(CHECKS))
def test_the_control_raises_its_code_and_the_verdict_is_not_pass(tmp_path: Path, code) -> None:
    document = CONTROLS[code](tmp_path)
    assert code in codes_in(document), (code, document["blocking"], codes_in(document))
    assert document["verdict"] != "PASS"


def test_the_untouched_report_raises_no_code(tmp_path: Path) -> None:
    write_backend(junit(tmp_path), "cpu", IDS)
    document = sign(tmp_path)
    assert document["verdict"] == "PASS"
    assert codes_in(document) == set()


@pytest.mark.parametrize("code", list(CHECKS))
def test_every_issue_of_a_control_carries_a_code(tmp_path: Path, code) -> None:
    document = CONTROLS[code](tmp_path)
    assert None not in document["blocking_codes"], document["blocking"]
    assert None not in document["error_codes"], document["errors"]
    for backend in document["backends"]:
        assert None not in backend["issue_codes"], backend["issues"]
        if backend["status"] in ("FAIL", "INCOMPLETE", "STALE"):
            assert backend["code"] in CHECKS, (backend["backend"], backend["reason"])


def test_the_reports_show_the_codes(tmp_path: Path) -> None:
    document = missing_ids(tmp_path)
    assert document["backends"][0]["code"] == "SIGN007"
    assert "[SIGN007] cpu: INCOMPLETE: 1 expected ids not reported" in render_markdown(document)
    assert "[SIGN007] cpu: INCOMPLETE: 1 expected ids not reported" in render_html(document)
    assert json.loads(json.dumps(document))["blocking_codes"] == ["SIGN007"]


def test_the_docs_list_exactly_the_table() -> None:
    table = [(check.code, check.summary) for check in CHECKS.values()]
    assert listed_rules("signoff.md", "Checks") == table


def test_each_check_is_declared_under_its_own_code() -> None:
    assert all(code == check.code for code, check in CHECKS.items())
    assert list(CHECKS) == [f"SIGN{number:03d}" for number in range(1, len(CHECKS) + 1)]


# --- a code is written once: in its declaration --------------------------------------------

CODE = re.compile(r"SIGN\d{3}")
DECLARATIONS = REPO / "conformance" / "signoff" / "checks.py"


def written_codes(source: str) -> list[int]:
    """Lines where ``source``'s code (not a docstring or comment) writes a sign-off code."""
    tree = ast.parse(source)
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return sorted(
        {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in prose
            and CODE.search(node.value)
        }
    )


def test_no_module_but_the_declarations_writes_a_code() -> None:
    writers = {
        path.relative_to(REPO).as_posix(): lines
        for path in sorted((REPO / "conformance").rglob("*.py"))
        if path != DECLARATIONS and (lines := written_codes(path.read_text(encoding="utf-8")))
    }
    assert writers == {}


def test_a_code_written_at_the_raise_is_found() -> None:
    source = (
        "def failed(judged):\n"
        '    """A test failed (SIGN010)."""\n'
        "    # SIGN010 in a comment is prose too\n"
        '    return Issue("SIGN010", "1 failed")\n'
        "LABEL = f\"committed ({'SIGN022'})\"\n"
    )
    assert written_codes(source) == [4, 5]
