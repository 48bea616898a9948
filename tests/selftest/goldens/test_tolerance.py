"""Golden tolerances: the widened bound against a golden and its worst-case soundness."""

from __future__ import annotations

import math

import pytest
import torch

from conformance.goldens import output_tolerance
from conformance.goldens.tolerance import GOLDEN_FP32_OUT, check_bound, combined_cos_diff
from conformance.numerics.tolerances import tolerance_for

pytestmark = pytest.mark.selftest


def test_output_tolerance_widens_the_backend_tolerance() -> None:
    bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
    for q, kv in ((bf16, bf16), (bf16, fp8), (fp8, fp8)):
        for kind in ("fp32-reference", "tensor-core"):
            own, vs_golden = tolerance_for(q, kv, kind), output_tolerance(q, kv, kind)
            assert vs_golden.atol > own.atol and vs_golden.rtol >= own.rtol
            assert vs_golden.cos_diff > own.cos_diff
    # bf16 q: the golden is fp32-exact, so the widening is negligible
    own = tolerance_for(bf16, bf16, "fp32-reference")
    assert output_tolerance(bf16, bf16, "fp32-reference").atol < own.atol * 1.01


def _cos_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """``1 - 2Σxy / Σ(x² + y²)`` in its cancellation-free form."""
    return float(((x - y) ** 2).sum() / (x * x + y * y).sum())


def _away_from(r: torch.Tensor, e: torch.Tensor, cos_diff: float, sign: float) -> torch.Tensor:
    """r plus a multiple of `e` (orthogonal to r) with ``cos(result, r) == cos_diff``."""
    scale = math.sqrt(2 * cos_diff / (1 - cos_diff)) * r.norm() / e.norm()
    return r + sign * scale * e


def test_combined_cos_bound_holds_for_worst_case_errors() -> None:
    gen_ = torch.Generator().manual_seed(0)
    for c_a, c_g in ((1e-5, 1e-10), (1.2e-3, 1.2e-3), (3e-3, 1e-4)):
        bound = combined_cos_diff(c_a, c_g)
        assert bound >= (math.sqrt(c_a) + math.sqrt(c_g)) ** 2  # at least the first order
        r = torch.randn(4096, generator=gen_, dtype=torch.float64)
        e = torch.randn(4096, generator=gen_, dtype=torch.float64)
        e -= (e @ r) / (r @ r) * r
        # Orthogonal errors in opposite directions, and errors along r (scaling).
        pairs = [(_away_from(r, e, c_a, 1.0), _away_from(r, e, c_g, -1.0))]
        # Along r: r (1 + t) and r (1 - t') with cos(., r) = c exactly.
        grow = (c_a + math.sqrt(c_a * c_a + 2 * c_a * (1 - c_a))) / (1 - c_a)
        shrink = (-c_g + math.sqrt(c_g * c_g + 2 * c_g * (1 - c_g))) / (1 - c_g)
        pairs.append((r * (1 + grow), r * (1 - shrink)))
        for a, g in pairs:
            assert _cos_diff(a, r) == pytest.approx(c_a, rel=1e-4)
            assert _cos_diff(g, r) == pytest.approx(c_g, rel=1e-4)
            assert _cos_diff(a, g) <= bound


def test_check_bound_flags_moved_infinities_and_excess() -> None:
    r = torch.tensor([1.0, -math.inf, 2.0])
    assert check_bound(r.clone(), r, GOLDEN_FP32_OUT).ok
    moved = torch.tensor([1.0, 0.0, 2.0])
    assert "NaN/inf position" in check_bound(moved, r, GOLDEN_FP32_OUT).problem
    off = torch.tensor([1.001, -math.inf, 2.0])
    result = check_bound(off, r, GOLDEN_FP32_OUT)
    assert not result.ok and result.worst_ratio > 1
