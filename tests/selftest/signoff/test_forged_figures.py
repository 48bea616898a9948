"""A report whose golden comparisons carry no error figures, or never ran, is not a PASS."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.applicability import Declaration, case_facts_table, not_applicable
from conformance.signoff.engine import run_signoff
from conformance.signoff.model import Status

from synthetic_reports import node_ids, offline_options, rewrite_junit, write_backend

IDS = node_ids("metadata", 3) + node_ids("numerics", 3, test="test_decode_matches_golden")


def _status(reports: Path) -> tuple[Status, str]:
    result = run_signoff(offline_options(reports, require=["cpu"]))
    backend = result.backends["cpu"]
    return backend.status, backend.reason


def test_the_synthetic_report_passes(tmp_path: Path) -> None:
    write_backend(tmp_path / "junit", "cpu", IDS)
    assert _status(tmp_path)[0] is Status.PASS


def test_passed_comparisons_without_their_figures_are_incomplete(tmp_path: Path) -> None:
    junit = write_backend(tmp_path / "junit", "cpu", IDS)[0]
    # the forger's edit: skipped cases turned into passes, with no figures to show
    rewrite_junit(junit, re.sub(r'<property name="out_max_abs_err"[^>]*/>', "", junit.read_text()))
    status, reason = _status(tmp_path)
    assert status is Status.INCOMPLETE
    assert "3 passed numerics case(s) carry no error figures (out_max_abs_err)" in reason


def test_a_backend_whose_comparisons_were_all_not_applicable_is_incomplete(
    tmp_path: Path,
) -> None:
    fp8_q = [case for case in case_facts_table().values() if case.q_dtype != "bf16"][:3]
    declaration = Declaration("cpu", q_dtypes=("bf16",))
    numerics = [
        f"tests/conformance/test_numerics.py::test_decode_matches_golden[{c.id}]" for c in fp8_q
    ]
    messages = {node_id: not_applicable(declaration, node_id) for node_id in numerics}
    assert all(messages.values())
    write_backend(tmp_path / "junit", "cpu", node_ids("metadata", 3) + numerics, skips=messages)
    options = offline_options(tmp_path, require=["cpu"], declarations={"cpu": declaration})
    backend = run_signoff(options).backends["cpu"]
    assert backend.status is Status.INCOMPLETE
    assert backend.reason.startswith("the numerics contract did not run"), backend.reason
