"""The sign-off re-derives every not-applicable skip from the declaration and the test id.

The honest run (the harness's reasons for what the declaration rules out) signs off PASS; a
backend that declares fp8 KV and calls its fp8 cases not applicable itself, and a report whose
reasons contradict the declaration, do not, also with ``--release``: the issue (SIGN009)
names the test and the declaration.
"""

from __future__ import annotations

import json
from pathlib import Path

from conformance.applicability import Declaration, case_facts_table, not_applicable
from conformance.signoff.engine import run_signoff
from conformance.signoff.model import Outcome, Status, Verdict

from synthetic_reports import node_ids, offline_options, write_backend

IDS = node_ids("metadata", 4)
CASES = case_facts_table()
NUMERICS = [f"tests/conformance/test_numerics.py::test_decode_matches_golden[{c}]" for c in CASES]
FP8 = [node_id for node_id, case in zip(NUMERICS, CASES.values(), strict=True) if case.has_fp8]
BF16 = [node_id for node_id in NUMERICS if node_id not in FP8]
TAKES_FP8_KV = Declaration("cpu", "aiter-v1", ("bf16", "e4m3fn", "e4m3fnuz"), ("bf16", "e4m3fn"))
BF16_ONLY = Declaration("cpu", "aiter-v1")
FP8_KV_CLAIM = "not applicable: cpu declares kv_dtypes=(bf16), the case has kv e4m3fn"


def _write(reports: Path, skips: dict[str, str], **sidecar: object) -> None:
    (junit,) = write_backend(reports / "junit", "cpu", IDS + NUMERICS, skips=skips)
    if sidecar:
        path = junit.with_name("cpu.meta.json")
        path.write_text(json.dumps({**json.loads(path.read_text()), **sidecar}))


def _sign(reports: Path, declaration: Declaration | None, **changes: object):
    declarations = {"cpu": declaration} if declaration else None
    return run_signoff(offline_options(reports, write=False, declarations=declarations, **changes))


def _honest(declaration: Declaration) -> dict[str, str]:
    reasons = {node_id: not_applicable(declaration, node_id) for node_id in NUMERICS}
    return {node_id: reason for node_id, reason in reasons.items() if reason}


def test_the_suites_own_reasons_sign_off(tmp_path: Path) -> None:
    skips = _honest(BF16_ONLY)
    assert set(skips) == set(FP8)
    _write(tmp_path, skips)
    result = _sign(tmp_path, BF16_ONLY, require=["cpu"])
    assert result.verdict == Verdict.PASS, result.blocking
    cpu = result.backends["cpu"]
    assert cpu.reason == f"{len(IDS) + len(BF16)} passed, {len(FP8)} not-applicable"


def test_a_backend_that_opts_out_of_declared_fp8_kv_does_not_sign_off(tmp_path: Path) -> None:
    """It declares fp8 KV; its run says the fp8-KV cases are not applicable."""
    fp8_kv = [n for n in FP8 if not_applicable(TAKES_FP8_KV, n) is None]
    _write(tmp_path, dict.fromkeys(fp8_kv, FP8_KV_CLAIM))
    for release in (False, True):
        result = _sign(tmp_path, TAKES_FP8_KV, release=release, no_collect=True, require=["cpu"])
        cpu = result.backends["cpu"]
        assert result.verdict != Verdict.PASS
        assert (cpu.status, cpu.code) == (Status.INCOMPLETE, "SIGN009")
        assert cpu.reason.startswith(f"{len(fp8_kv)} tests reported not applicable")
        assert fp8_kv[0] in cpu.reason
        assert TAKES_FP8_KV.words() in cpu.reason
        assert not any(case.outcome is Outcome.NOT_APPLICABLE for case in cpu.cases)


def test_reasons_that_contradict_the_declaration_block(tmp_path: Path) -> None:
    """bf16 golden cases called not applicable to a backend that declares bf16."""
    claim = "not applicable: cpu declares kv_dtypes=(bf16,)"
    _write(tmp_path, {**_honest(BF16_ONLY), **dict.fromkeys(BF16, claim)})
    result = _sign(tmp_path, BF16_ONLY, release=True, no_collect=True)
    cpu = result.backends["cpu"]
    assert cpu.status == Status.INCOMPLETE and cpu.code == "SIGN009"
    assert f"{len(BF16)} tests reported not applicable" in cpu.reason
    assert BF16[0] in cpu.reason and BF16_ONLY.words() in cpu.reason
    assert "the test applies" in cpu.reason
    assert any(line.code == "SIGN009" for line in result.blocking if line.startswith("cpu:"))


def test_the_declaration_recorded_in_the_sidecar_decides(tmp_path: Path) -> None:
    """Where the class cannot be loaded (a plug-in not installed here), the run's record."""
    _write(tmp_path, _honest(BF16_ONLY), declaration=BF16_ONLY.to_json())
    assert _sign(tmp_path, None).backends["cpu"].status == Status.PASS
    _write(tmp_path, _honest(BF16_ONLY), declaration=TAKES_FP8_KV.to_json())
    assert _sign(tmp_path, None).backends["cpu"].code == "SIGN009"


def test_a_run_recording_another_declaration_than_the_class_blocks(tmp_path: Path) -> None:
    _write(tmp_path, _honest(BF16_ONLY), declaration=BF16_ONLY.to_json())
    cpu = _sign(tmp_path, TAKES_FP8_KV).backends["cpu"]
    assert (cpu.status, cpu.code) == (Status.INCOMPLETE, "SIGN021")
    assert BF16_ONLY.words() in cpu.reason and TAKES_FP8_KV.words() in cpu.reason


def test_a_declaration_nobody_can_tell_leaves_no_claim_explained(tmp_path: Path) -> None:
    _write(tmp_path, _honest(BF16_ONLY))
    cpu = _sign(tmp_path, None).backends["cpu"]
    assert cpu.code == "SIGN009"
    assert "cannot be checked" in cpu.reason


def test_a_claim_on_a_case_the_table_lacks_is_unexplained(tmp_path: Path) -> None:
    ghost = "tests/conformance/test_numerics.py::test_decode_matches_golden[no-such-case]"
    write_backend(
        tmp_path / "junit",
        "cpu",
        [*IDS, ghost],
        outcomes={ghost: "skipped"},
        messages={ghost: "not applicable: cpu declares q_dtypes=(bf16), the case has q e4m3fn"},
    )
    cpu = _sign(tmp_path, BF16_ONLY).backends["cpu"]
    assert cpu.code == "SIGN009"
    assert "not in the case table" in cpu.reason
