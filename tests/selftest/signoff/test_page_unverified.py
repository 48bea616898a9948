"""A backend whose reports fail the integrity checks is not painted as a verified pass.

A report copied under another backend's name has every test passed; the backend is
INCOMPLETE, and its family cells must not carry the green of a verified result.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conformance.signoff.engine import run_signoff
from conformance.signoff.model import Status
from conformance.signoff.report_html import render_html
from conformance.signoff.report_json import signoff_document

from synthetic_reports import node_ids, offline_options, write_backend

pytestmark = pytest.mark.selftest

IDS = node_ids("metadata", 4) + node_ids("stubs", 2)


def _row(html: str, backend: str) -> str:
    matrix = html[html.index("Backend × family") :]
    match = re.search(rf"<tr><td>{backend}</td>(.*?)</tr>", matrix, re.S)
    assert match, f"no matrix row for {backend}"
    return match.group(1)


def test_a_forged_backend_has_no_green_cell(tmp_path: Path) -> None:
    junit = tmp_path / "reports" / "junit"
    write_backend(junit, "cpu", IDS)
    write_backend(junit, "interpret", IDS)
    shutil.copy(junit / "cpu.xml", junit / "interpret.xml")  # cpu's report under interpret's name
    options = offline_options(tmp_path / "reports", runnable=("cpu", "interpret"), write=False)
    result = run_signoff(options)
    assert result.backends["interpret"].status == Status.INCOMPLETE
    html = render_html(signoff_document(result))
    assert 'class="PASS"' in _row(html, "cpu")
    forged = _row(html, "interpret")
    assert "passed" in forged and 'class="PASS"' not in forged, forged
    assert 'class="INCOMPLETE"' in forged
