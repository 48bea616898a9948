"""The page's layout for a release manager: STALE evidence looks stale, the headroom chart reads
from the top and shows each golden case once, and failures come grouped by cause, before it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conformance.signoff.chart import headroom_svg, wrap_label
from conformance.signoff.engine import run_signoff
from conformance.signoff.failure_groups import message_shape, plain_message
from conformance.signoff.report_html import render_html
from conformance.signoff.report_json import signoff_document
from conformance.signoff.report_md import render_markdown

from synthetic_reports import (
    add_figures,
    node_ids,
    offline_options,
    write_backend,
    write_evidence,
)

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[3]
CASES = ["gfx942-h16-fp8-q4-p16-cu80-masked-split", "tiny-triton-h16-fp8-q4-p1-cu132-tail"]
NUMERICS = [f"tests/conformance/test_numerics.py::test_decode_matches_golden[{c}]" for c in CASES]
PLAN = [f"tests/conformance/test_plan.py::test_decode_is_plan_invariant[{c}]" for c in CASES]
IDS = node_ids("metadata", 4) + NUMERICS + PLAN
FIGURES = {"out_max_abs_err": "0.1", "out_atol": "0.4", "out_err_over_tol": "0.25"}


def with_figures(junit: Path, figures: dict[str, str] = FIGURES) -> None:
    """Give every golden comparison of ``junit`` error figures with tolerances (and reseal)."""
    add_figures(junit, figures)


def _document(reports: Path, **options) -> dict:
    result = run_signoff(offline_options(reports, write=False, **options))
    return signoff_document(result)


@pytest.fixture
def with_cuda_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """cpu ran here; cuda comes from evidence, STALE or current as asked."""
    monkeypatch.chdir(REPO)  # the evidence is fingerprinted from this checkout

    def make(*, stale: bool) -> dict:
        reports = tmp_path / ("stale" if stale else "current")
        (cpu,) = write_backend(reports / "junit", "cpu", IDS)
        with_figures(cpu)
        evidence = reports / "evidence" / "2026-01-02-cuda"
        (junit, *_) = write_evidence(evidence, "cuda", IDS)
        with_figures(junit)
        for path in evidence.glob("*.meta.json"):
            document = json.loads(path.read_text())
            path.write_text(json.dumps({**document, "gpus": ["Synthetic GPU"]}))
        if stale:  # evidence without file hashes is stale
            (evidence / "versions.json").write_text(json.dumps({"backend": "cuda"}))
        return _document(reports, evidence_dir=reports / "evidence", root=REPO)

    return make


@pytest.mark.parametrize("stale", [True, False])
def test_stale_evidence_looks_stale_in_the_matrix_and_the_chart(
    with_cuda_evidence, stale: bool
) -> None:
    document = with_cuda_evidence(stale=stale)
    cuda = next(b for b in document["backends"] if b["backend"] == "cuda")
    assert (cuda["status"] == "STALE") is stale
    html, markdown = render_html(document), render_markdown(document)
    matrix = html[
        html.index("<h2>Backend × family") : html.index("</table>", html.index("× family"))
    ]
    cuda_row = matrix[matrix.index("<td>cuda") : matrix.index("</tr>", matrix.index("<td>cuda"))]
    cpu_row = matrix[matrix.index("<td>cpu") : matrix.index("</tr>", matrix.index("<td>cpu"))]
    assert ('class="stale"' in cuda_row and 'class="stale-tag"' in cuda_row) is stale
    assert 'class="stale"' not in cpu_row and 'class="PASS"' in cpu_row
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert ('fill="url(#stale-' in svg) is stale
    assert ("cuda (stale evidence)" in svg) is stale
    assert re.search(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="7" fill="#1f77b4"', svg)
    assert ("| cuda (STALE) |" in markdown) is stale


def test_the_chart_has_its_scale_at_the_top_and_the_bottom() -> None:
    rows = [
        {"backend": "cpu", "case": f"case-{n}", "ratio": n / 50, "figures": {"out cos": n / 50}}
        for n in range(45)
    ]
    svg = headroom_svg(rows, ["cpu"])
    for tick in ("0", "0.25", "0.5", "1"):
        assert len(re.findall(rf">{re.escape(tick)}</text>", svg)) == 2, tick
    tops = [
        float(y) for y in re.findall(r'<text x="[^"]+" y="([\d.]+)" text-anchor="middle">0<', svg)
    ]
    first_bar = min(float(y) for y in re.findall(r'<rect x="[^"]+" y="([\d.]+)" width', svg)[1:])
    assert min(tops) < first_bar < max(tops), "one scale above the bars, one below"


def test_each_golden_case_is_one_row_however_many_tests_compared_it(with_cuda_evidence) -> None:
    document = with_cuda_evidence(stale=False)
    cpu = next(b for b in document["backends"] if b["backend"] == "cpu")
    assert sorted(row["case"] for row in cpu["headroom"]) == sorted(CASES)
    row = cpu["headroom"][0]
    assert row["tests"] == ["decode_matches_golden", "decode_is_plan_invariant"]
    assert len(row["ids"]) == 2
    svg = render_html(document)
    for case in CASES:
        assert svg.count(f">{case}</tspan>") == 1, case
    assert "decode_is_plan_invariant[" not in svg[svg.index("<svg") :]


def test_the_worst_of_a_cases_tests_is_drawn() -> None:
    from conformance.signoff.headroom import one_row_per_case

    rows = [
        {"id": f"t.py::test_{test}[X]", "ratio": ratio, "backend": "cuda"}
        for test, ratio in (("decode_matches_golden", 0.2), ("decode_is_plan_invariant", 0.7))
    ]
    (merged,) = one_row_per_case(rows)
    assert merged["ratio"] == 0.7 and merged["case"] == "X"


def test_a_long_case_name_wraps_instead_of_being_cut() -> None:
    name = "gfx950-h128-bf16q-fp8kv-q4-p64-cu256-vllm46997-a-very-long-name-of-a-golden-case"
    lines = wrap_label(name)
    assert len(lines) == 2 and "".join(lines) == name
    svg = headroom_svg([{"backend": "cpu", "case": name, "ratio": 0.5, "figures": {}}], ["cpu"])
    assert "…" not in svg
    assert all(f">{line}</tspan>" in svg for line in lines)


MISMATCH = "AssertionError: {case} decode (own metadata) out: MISMATCH ({n} elements; atol={a})"


def _failing(reports: Path, count: int) -> list[str]:
    ids = [
        f"tests/conformance/test_numerics.py::test_decode_matches_golden[c{n}-h16]"
        for n in range(count)
    ]
    other = "tests/conformance/test_metadata.py::test_case[0]"
    messages = {
        node_id: MISMATCH.format(case=f"c{n}-h16", n=1000 + n, a=0.5 + n)
        + "\n  detail\n[+14 more lines; full report in element text]"
        for n, node_id in enumerate(ids)
    }
    messages[other] = "AssertionError: seq_lens_cpu is None"
    all_ids = [*ids, other, "tests/conformance/test_stubs.py::test_case[0]"]
    outcomes = dict.fromkeys([*ids, other], "failed")
    (junit,) = write_backend(
        reports / "junit", "cpu", all_ids, outcomes=outcomes, messages=messages
    )
    with_figures(junit)
    return ids


def test_failures_of_one_cause_are_one_group_before_the_chart(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    ids = _failing(reports, 39)
    document = _document(reports)
    html, markdown = render_html(document), render_markdown(document)
    assert "40 in 2 groups" in html
    assert "cpu · numerics: 39 failed" in html and "cpu · metadata: 1 failed" in html
    assert (
        f"<code>{ids[2]}</code> and 36 more" in html
        and f"<code>{ids[3]}</code>" not in html.split("and 36 more")[0]
    )
    assert "all 39 ids" in html and html.count(ids[20]) == 1, "the rest are folded, once"
    assert html.index("Failures, errors") < html.index("Tolerance headroom")
    assert '<details class="chart">' in html, "the chart is folded on a failing page"
    assert "The full message of each is in reports/junit/cpu.xml." in html
    assert "full report in element text" not in html + markdown
    assert "[+14 more lines: the full message is in reports/junit/cpu.xml]" in html
    assert "### cpu · numerics: 39 failed" in markdown and "and 36 more" in markdown
    assert markdown.index("## Failures") < markdown.index("## Tolerance headroom")


def test_a_passing_page_shows_the_chart_unfolded(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    (junit,) = write_backend(reports / "junit", "cpu", IDS)
    with_figures(junit)
    html = render_html(_document(reports))
    assert "<svg" in html and '<details class="chart">' not in html


SHAPES = [
    ("AssertionError: c1 decode out: MISMATCH (12 elements; atol=0.5)", "c1",
     "AssertionError: c2 decode out: MISMATCH (99 elements; atol=1e-05)", "c2", True),
    ("AssertionError: c1 decode out: MISMATCH", "c1",
     "AssertionError: c2 decode lse: MISMATCH", "c2", False),
    ("KeyError: 0x7f3a12", "c1", "KeyError: 0x11ff00", "c2", True),
    ("AttributeError: 'X' has no attribute 'q_lora_rank'", "c1",
     "AttributeError: 'X' has no attribute 'v_head_dim'", "c2", False),
    ("Failed: q bf16, kv e4m3fn: 3 problem(s) in 12 query rows", "q-bf16-kv-e4m3fn",
     "Failed: q e4m3fnuz, kv e4m3fnuz: 2 problem(s) in 12 query rows", "q-e4m3fnuz-kv-e4m3fnuz",
     True),
    ("Failed: q bf16, kv e4m3fn: output off", "q-bf16-kv-e4m3fn",
     "Failed: q bf16, kv e4m3fn: LSE off", "q-bf16-kv-e4m3fn", False),
]  # fmt: skip


@pytest.mark.parametrize(("first", "one_id", "second", "two_id", "same"), SHAPES)
def test_a_message_shape_ignores_numbers_and_the_case_only(
    first: str, one_id: str, second: str, two_id: str, same: bool
) -> None:
    one = message_shape(first, f"t.py::test_x[{one_id}]")
    two = message_shape(second, f"t.py::test_x[{two_id}]")
    assert (one == two) is same, (one, two)


def test_pytests_note_on_a_shortened_message_names_the_file() -> None:
    text = plain_message("boom\n[+3 more lines; full report in element text]", ["a/cpu.xml"])
    assert text == "boom\n[+3 more lines: the full message is in a/cpu.xml]"
    cut = plain_message("boom...\n[truncated; full report in element text]", ["a/cpu.xml"])
    assert cut.endswith("[the message is cut: the full message is in a/cpu.xml]")
    assert plain_message("no note here", ["a/cpu.xml"]) == "no note here"
