"""Self-tests of the comparator (`conformance.numerics.compare`) and the tolerance table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from conformance.numerics.compare import assert_close, compare
from conformance.numerics.tolerances import (
    KINDS,
    Tolerance,
    format_table,
    lse_tolerance_for,
    tolerance_for,
)

TOL = Tolerance(atol=1e-3, rtol=1e-2, cos_diff=1e-5)
DOCS = Path(__file__).resolve().parents[3] / "docs" / "tolerances.md"


def expected_tensor() -> torch.Tensor:
    return torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_identical_tensors_pass() -> None:
    x = expected_tensor()
    report = assert_close(x.clone(), x, tol=TOL, name="out")
    assert report.ok and report.mismatches == 0 and report.max_abs_err == 0.0
    assert abs(report.cos_diff) < 1e-15
    assert "out: ok" in report.message()


@pytest.mark.parametrize("side", ["actual", "expected"])
def test_nan_position_mismatch_is_caught(side: str) -> None:
    x = expected_tensor()
    y = x.clone()
    (y if side == "actual" else x)[1, 2, 3] = float("nan")
    report = compare(y, x, tol=TOL, name="out")
    assert not report.ok
    assert "NaN/Inf positions differ at 1 element(s), first at (1, 2, 3)" in report.message()
    assert report.worst[0].index == (1, 2, 3)


def test_matching_nan_and_inf_positions_pass() -> None:
    x = expected_tensor()
    x[0, 0, 0] = float("nan")
    x[1, 1, 1] = float("-inf")
    assert compare(x.clone(), x, tol=TOL).ok


def test_inf_sign_mismatch_is_caught() -> None:
    x = expected_tensor()
    x[2, 0, 1] = float("-inf")
    y = x.clone()
    y[2, 0, 1] = float("inf")
    report = compare(y, x, tol=TOL)
    assert not report.ok and "NaN/Inf positions differ" in report.message()


def test_abs_or_rel_bound() -> None:
    elementwise = Tolerance(atol=1e-3, rtol=1e-2, cos_diff=1.0)  # cosine check out of play
    x = torch.tensor([10.0, 1e-4, 2.0], dtype=torch.float64)
    # 0.05 off at 10: > atol but < rtol*|b| = 0.1 → passes; 5e-4 off near 0: < atol → passes.
    y = x + torch.tensor([0.05, 5e-4, 0.0], dtype=torch.float64)
    assert compare(y, x, tol=elementwise).ok
    # 0.05 off at 2: > atol and > rtol*|b| = 0.02 → one mismatch.
    y = x + torch.tensor([0.0, 0.0, 0.05], dtype=torch.float64)
    report = compare(y, x, tol=elementwise, name="lse")
    assert not report.ok and report.mismatches == 1
    assert report.max_abs_err == pytest.approx(0.05)
    assert report.max_rel_err == pytest.approx(0.025)
    assert "1 of 3 finite element(s) exceed" in report.message()


def test_cosine_violation_is_caught_when_elements_pass() -> None:
    # Tiny values, each off by just under atol in the same direction: every element passes
    # the abs-or-rel test, the direction of the whole tensor does not.
    x = torch.full((100,), 1e-4, dtype=torch.float64)
    y = x + 0.9e-3
    report = compare(y, x, tol=TOL)
    assert report.mismatches == 0
    assert not report.ok and report.cos_diff > TOL.cos_diff
    assert "cos diff" in report.message() and "exceeds 1e-05" in report.message()


def test_report_names_the_worst_element() -> None:
    x = expected_tensor()
    y = x.clone()
    y[1, 2, 3] += 0.5
    y[3, 4, 5] += 0.05
    report = compare(y, x, tol=TOL, name="out", worst_k=2)
    assert [e.index for e in report.worst] == [(1, 2, 3), (3, 4, 5)]
    worst = report.worst[0]
    assert worst.actual == pytest.approx(float(x[1, 2, 3]) + 0.5)
    assert worst.expected == float(x[1, 2, 3])
    assert "index (1, 2, 3): actual" in report.message()
    with pytest.raises(AssertionError, match=r"out: MISMATCH[\s\S]*index \(1, 2, 3\)"):
        assert_close(y, x, tol=TOL, name="out")


def test_shape_and_dtype_are_checked() -> None:
    x = expected_tensor()
    assert "shape: expected (4, 5, 6)" in compare(x[:2], x, tol=TOL).message()
    assert "dtype: expected torch.float64" in compare(x.float(), x, tol=TOL).message()
    # A bf16 result against an fp64 reference: name the dtype the result must have.
    assert compare(x.to(torch.bfloat16), x, tol=TOL, dtype=torch.bfloat16).ok
    report = compare(x.to(torch.float16), x, tol=TOL, dtype=torch.bfloat16)
    assert not report.ok and "dtype: expected torch.bfloat16" in report.message()


def test_assert_close_hides_its_frame() -> None:
    assert "__tracebackhide__" in assert_close.__code__.co_varnames


# --------------------------------------------------------------------------------------
# Tolerances


def test_docs_table_is_the_generated_table() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(
        r"<!-- tolerance-table:start -->\n(.*?)\n<!-- tolerance-table:end -->", text, re.S
    )
    assert block, f"{DOCS}: tolerance-table markers not found"
    assert block.group(1) == format_table()


def test_tolerance_ordering_follows_the_error_model() -> None:
    bf16, e4m3, fnuz = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz
    ref = tolerance_for(bf16, bf16, "fp32-reference")
    tc = tolerance_for(bf16, bf16, "tensor-core")
    f8 = tolerance_for(e4m3, e4m3, "fp32-reference")
    assert ref.rtol == tc.rtol == 2.0**-7  # output rounding to bf16, twice
    assert ref.atol < tc.atol < f8.atol and ref.cos_diff < tc.cos_diff < f8.cos_diff
    assert tolerance_for(fnuz, fnuz, "tensor-core") == tolerance_for(e4m3, e4m3, "tensor-core")
    # P rounding does not enter the LSE.
    lse_ref, lse_f8 = (
        lse_tolerance_for(bf16, bf16, "fp32-reference"),
        lse_tolerance_for(e4m3, e4m3, "fp32-reference"),
    )
    assert lse_f8.atol == pytest.approx(lse_ref.atol, rel=0.02)
    assert tolerance_for(bf16, bf16, "fp32-reference", value_rms=2.0).atol == pytest.approx(
        2 * ref.atol
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.bfloat16, torch.bfloat16, "cuda"), "kind: expected one of"),
        ((torch.float16, torch.bfloat16, KINDS[0]), "q_dtype: expected torch.bfloat16"),
        ((torch.bfloat16, torch.float32, KINDS[1]), "kv_dtype: expected torch.bfloat16"),
    ],
)
def test_tolerance_for_rejects_unknown_inputs(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tolerance_for(*args)
