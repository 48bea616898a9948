"""A backend whose decode skips its own fp8 cases as "not applicable": one finding, SIGN009.

The harness rewrites such a skip at run time (`conformance.runs.skip_reasons`); the sign-off
must still read it as a not-applicable claim the declaration does not support (SIGN009, the
code `docs/plugins.md` names), quote it without cutting a word, and show the 44 identical
skips as one group, not one per case-id piece their common message happens to contain.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conformance.applicability import Declaration, case_facts_table
from conformance.runs.skip_reasons import claimed_elsewhere, parse_claimed_elsewhere
from conformance.signoff.engine import run_signoff
from conformance.signoff.failure_groups import failure_groups
from conformance.signoff.model import Outcome, Status
from conformance.signoff.report_json import signoff_document
from conformance.signoff.report_md import render_markdown
from conformance.signoff.verdict import clipped

from synthetic_reports import node_ids, offline_options, write_backend

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]

TAKES_FP8 = Declaration(
    "cpu", "aiter-v1", ("bf16", "e4m3fn", "e4m3fnuz"), ("bf16", "e4m3fn", "e4m3fnuz")
)
REASON = "this decode does not take fp8 caches in this build yet, sorry about the long reason"
FP8_PAIRS = (
    "q-bf16-kv-e4m3fn",
    "q-bf16-kv-e4m3fnuz",
    "q-e4m3fn-kv-e4m3fn",
    "q-e4m3fnuz-kv-e4m3fnuz",
)
MESSAGE = claimed_elsewhere(TAKES_FP8.words(), REASON)  # what the harness writes in the JUnit


def _fp8_ids() -> list[str]:
    numerics = [
        f"tests/conformance/test_numerics.py::test_decode_matches_golden[{case.id}]"
        for case in case_facts_table().values()
        if case.has_fp8
    ]
    masking = [
        "tests/conformance/test_masking.py::"
        f"test_no_token_outside_the_causal_window_reaches_the_output[{pair}]"
        for pair in FP8_PAIRS
    ]
    return numerics + masking


def _sign(tmp_path, skipped: list[str], message: str):
    ids = node_ids("metadata", 4) + skipped
    write_backend(tmp_path / "junit", "cpu", ids, skips=dict.fromkeys(skipped, message))
    declarations = {"cpu": TAKES_FP8}
    options = offline_options(tmp_path, write=False, require=["cpu"], declarations=declarations)
    return run_signoff(options)


def test_the_harness_words_parse_back() -> None:
    assert parse_claimed_elsewhere(MESSAGE) == (TAKES_FP8.words(), REASON)
    assert parse_claimed_elsewhere("no fp8 here") is None


def test_a_decode_that_skips_its_declared_fp8_cases_blocks_with_sign009(tmp_path) -> None:
    skipped = _fp8_ids()
    result = _sign(tmp_path, skipped, MESSAGE)
    cpu = result.backends["cpu"]
    assert (cpu.status, cpu.code) == (Status.INCOMPLETE, "SIGN009"), cpu.reason
    assert f"{len(skipped)} tests reported not applicable" in cpu.reason
    assert REASON in cpu.reason and "declares" in cpu.reason
    assert all(c.outcome == Outcome.SKIPPED for c in cpu.cases if c.node_id in skipped)


def test_the_code_is_the_one_the_plugin_guide_names(tmp_path) -> None:
    guide = (REPO_ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    sentence = guide[guide.index('calls `pytest.skip("not applicable: ...")` itself') :]
    named = re.search(r"SIGN\d{3}", sentence)
    assert named is not None
    cpu = _sign(tmp_path, _fp8_ids(), MESSAGE).backends["cpu"]
    assert cpu.code == named.group(0)


def test_identical_skips_are_one_group(tmp_path) -> None:
    skipped = _fp8_ids()
    document = signoff_document(_sign(tmp_path, skipped, MESSAGE))
    groups = failure_groups(document)
    assert [group["count"] for group in groups] == [len(skipped)], [g["shape"] for g in groups]
    assert groups[0]["family"] == "numerics, masking"
    assert f"{len(skipped)} in 1 group(s)" in render_markdown(document)


def test_messages_that_differ_by_case_id_still_group_by_shape() -> None:
    cases = list(case_facts_table())[:3]
    failed = [f"tests/conformance/test_numerics.py::test_decode_matches_golden[{c}]" for c in cases]
    document = {
        "backends": [
            {
                "backend": "cpu",
                "provenance": [],
                "problems": [
                    {
                        "id": node_id,
                        "family": "numerics",
                        "outcome": "failed",
                        "message": f"{node_id.split('[')[1][:-1]} out: MISMATCH (3 elements)",
                        "source": "cpu.xml",
                    }
                    for node_id in failed
                ],
            }
        ]
    }
    (group,) = failure_groups(document)
    assert group["count"] == 3 and group["shape"] == "‹case› out: MISMATCH (# elements)"


def test_an_unexplained_skip_is_quoted_without_cutting_a_word(tmp_path) -> None:
    skipped = node_ids("numerics", 2, test="test_decode_matches_golden")
    long_reason = "no fp8 " + " ".join(f"word{index}" for index in range(80))
    cpu = _sign(tmp_path, skipped, long_reason).backends["cpu"]
    assert cpu.code == "SIGN012"
    quoted = cpu.reason.split(f"{skipped[0]}: ", 1)[1].split(" …", 1)[0]
    assert long_reason.startswith(quoted) and long_reason[len(quoted)] == " ", quoted[-20:]


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [("short", 10, "short"), ("one two three", 8, "one two …"), ("abcdefghij", 4, "abcd …")],
)
def test_clipped_cuts_at_a_word_boundary(text: str, limit: int, expected: str) -> None:
    assert clipped(text, limit) == expected
