"""The page a release manager reads: why not PASS first, colours, headroom chart, baseline,
no machine paths."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conformance.signoff.engine import run_signoff
from conformance.signoff.headroom import case_figures
from conformance.signoff.model import Verdict

from synthetic_reports import add_figures, node_ids, offline_options, write_backend

IDS = node_ids("metadata", 4) + node_ids("persistent", 3, test="test_decode_matches_golden")
NUMERICS = {
    "out_max_abs_err": "0.002", "out_max_rel_err": "0.01", "out_cos_diff": "1e-6",
    "out_atol": "0.01", "out_rtol": "0.02", "out_cos_tol": "1e-5", "out_err_over_tol": "0.25",
    "lse_max_abs_err": "1e-5", "lse_atol": "1e-4", "lse_rtol": "1e-4", "lse_max_rel_err": "1e-6",
}  # fmt: skip


def write(reports: Path, backend: str = "cpu", **kwargs) -> None:
    write_backend(reports / "junit", backend, IDS, **kwargs)


def with_figures(reports: Path, backend: str, figures: dict[str, str]) -> None:
    """Add error figures to the persistent cases of ``backend``'s report (and reseal it)."""
    add_figures(reports / "junit" / f"{backend}.xml", figures, "persistent")


def page(reports: Path, **changes) -> tuple[str, str, dict]:
    result = run_signoff(offline_options(reports, **changes))
    return (
        (reports / "signoff.html").read_text(),
        (reports / "signoff.md").read_text(),
        json.loads((reports / "signoff.json").read_text()) | {"_verdict": result.verdict},
    )


def test_blocking_reasons_come_first_one_line_per_backend(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write(reports, outcomes={IDS[0]: "failed"})
    html, markdown, document = page(reports, release=True, no_collect=True)
    assert document["_verdict"] == Verdict.FAIL
    assert document["blocking"] == [
        "cpu: FAIL: 6 passed, 1 failed",
        "cuda: required but not run: backend cuda unavailable: no cuda device on this machine",
        "rocm: required but not run: backend rocm unavailable: no rocm device on this machine",
    ]
    assert html.index("What stops a PASS") < html.index("<h2>Backends</h2>")
    assert markdown.index("## What stops a PASS") < markdown.index("| backend | status")


def test_required_not_run_is_red_and_optional_grey(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write(reports)
    html, _, document = page(reports, require=["cpu", "cuda"])
    assert '<td class="MISSING">NOT RUN</td>' in html  # cuda: required
    assert '<td class="NOTRUN">NOT RUN</td>' in html  # rocm: optional
    assert ".MISSING{background:#f3b0b0" in html and ".NOTRUN{background:#e6e6e6" in html
    not_signed = {row["backend"]: row["required"] for row in document["not_signed_off"]}
    assert not_signed == {"interpret": False, "cuda": True, "rocm": False}
    assert "<h2>Not signed off here</h2>" in html and "(required)" in html


def test_the_headroom_chart_draws_each_numerics_case(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write(reports)
    with_figures(reports, "cpu", NUMERICS)
    html, markdown, document = page(reports)
    rows = document["backends"][0]["headroom"]
    assert [row["ratio"] for row in rows] == pytest.approx([0.25] * 3)
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert svg.count("<rect") == 3 + 1  # three bars and the legend's swatch
    assert "tolerance" in svg and "http://www.w3.org/2000/svg" in svg
    assert not re.search(r"(src|href)=\"https?:", html), "the page loads nothing"
    assert "## Tolerance headroom" in markdown


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        (NUMERICS, {"out abs-or-rel": 0.25, "out cos": 0.1, "lse abs-or-rel": 0.01}),
        ({"out_max_abs_err": "0.02", "out_max_rel_err": "0.5", "out_atol": "0.01", "out_rtol": "1"},
         {"out abs-or-rel": 0.5}),
        ({"out_max_abs_err": "nan", "out_atol": "x", "out_cos_diff": "-1", "out_cos_tol": "1"}, {}),
        ({"out_err_over_tol": "inf", "out_cos_diff": "0", "out_cos_tol": "0"}, {"out cos": 0.0}),
    ],
)  # fmt: skip
def test_error_figures_are_read_robustly(properties: dict, expected: dict) -> None:
    assert case_figures(properties) == pytest.approx(expected)


def test_a_case_without_tolerances_is_counted_not_drawn(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write(reports)
    with_figures(reports, "cpu", {"out_max_abs_err": "0.1"})
    html, _, document = page(reports)
    assert document["backends"][0]["headroom_missing"] == 3
    assert "3 numerics cases recorded no tolerance" in html and "<svg" not in html


def test_a_baseline_names_what_changed(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write(reports, outcomes={IDS[1]: "failed"})
    page(reports)
    (reports / "signoff.json").rename(tmp_path / "before.json")
    for path in (reports / "junit").iterdir():
        path.unlink()
    later = [*IDS[1:], "tests/conformance/test_stubs.py::test_new"]
    write_backend(reports / "junit", "cpu", later, outcomes={IDS[2]: "failed"})
    html, markdown, document = page(reports, baseline=tmp_path / "before.json")
    changes = document["baseline"]["backends"]["cpu"]
    assert changes["newly_failing"]["ids"] == [IDS[2]]
    assert changes["newly_passing"]["ids"] == [IDS[1]]
    assert changes["added"]["ids"] == ["tests/conformance/test_stubs.py::test_new"]
    assert changes["removed"]["ids"] == [IDS[0]]
    assert "Changes since before.json" in html and "1 newly failing" in markdown


def test_no_absolute_machine_path_reaches_the_reports(tmp_path: Path) -> None:
    reports = (tmp_path / "reports").resolve()
    message = (
        f"{tmp_path}/tests/conformance/test_metadata.py:12: AssertionError in "
        "/opt/x/site-packages/torch/a.py"
    )
    write(reports, outcomes={IDS[0]: "failed"}, messages={IDS[0]: message})
    (reports / "junit" / "cuda.xml").write_text("<testsuites><testsuite")
    html, markdown, document = page(reports, root=tmp_path)
    for text in (html, markdown, json.dumps(document)):
        assert str(tmp_path) not in text
    assert (
        "tests/conformance/test_metadata.py:12: AssertionError in <site-packages>/torch/a.py"
        in markdown
    )
    assert "reports/junit/cuda.xml: is not well-formed XML" in markdown
