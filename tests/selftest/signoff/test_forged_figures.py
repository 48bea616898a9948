"""A report whose golden comparisons carry no error figures, or never ran, is not a PASS."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.signoff.engine import run_signoff
from conformance.signoff.model import Status

from synthetic_reports import node_ids, offline_options, reseal, write_backend

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
    junit.write_text(re.sub(r'<property name="out_max_abs_err"[^>]*/>', "", junit.read_text()))
    reseal(junit)
    status, reason = _status(tmp_path)
    assert status is Status.INCOMPLETE
    assert "3 passed numerics case(s) carry no error figures (out_max_abs_err)" in reason


def test_a_backend_whose_comparisons_were_all_not_applicable_is_incomplete(
    tmp_path: Path,
) -> None:
    numerics = [i for i in IDS if "test_decode_matches_golden" in i]
    outcomes = dict.fromkeys(numerics, "skipped")
    messages = dict.fromkeys(
        numerics, "not applicable: cpu declares q_dtypes=(), the case has q bf16"
    )
    write_backend(tmp_path / "junit", "cpu", IDS, outcomes=outcomes, messages=messages)
    status, reason = _status(tmp_path)
    assert status is Status.INCOMPLETE
    assert reason.startswith("the numerics contract did not run"), reason
