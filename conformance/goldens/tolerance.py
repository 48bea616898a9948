"""Tolerances of a backend's result against a golden, derived from the fp64-reference ones.

`conformance.numerics.tolerances` bounds a backend's error against the **fp64 monolithic
reference** r. A golden g is not r: it is the fp32 plan replay (AITER semantics), whose
own error against r is bounded at generation time (`GoldenBound`, checked by
`conformance.goldens.generate`):

- bf16 q: g equals r up to fp32 rounding; generation requires ``|g - r| <= 1e-5 +
  1e-5 |r|`` elementwise and a cosine difference below 1e-10 (the measured errors are
  ~1e-7).
- fp8 q: P is rounded to fp8 against each work's own row max, so g depends on the plan
  and differs from r by the P-rounding error. Generation requires the error model's own
  bound for the fp32 reference kind, ``|g - r| <= A + u |r|`` with ``A = atol/2`` and
  ``u = rtol/2`` of ``tolerance_for(q, kv, "fp32-reference")``, and its cosine bound.

A backend a (any plan, in particular a different ``num_cus``, whose fp8 P rounding differs)
satisfies the model's ``|a - r| <= A_a + u_a |r|`` (``A_a = atol/2``, ``u_a = rtol/2`` of
its own tolerance). By the triangle inequality, with ``|r| <= (|g| + A_g) / (1 - u_g)``::

    |a - g| <= A + U |g|,   U = (u_a + u_g) / (1 - u_g),   A = A_a + A_g + U A_g

so ``atol = 2A``, ``rtol = 2U`` pass every element (abs-or-rel). For the cosine
difference, ``cos(x, r) <= c`` gives ``‖x - r‖ <= ρ(c) ‖r‖`` with
``ρ(c) = (c + √(c² + 2c(1 - c))) / (1 - c)``; then
``cos(a, g) <= (ρ_a + ρ_g)² / ((1 - ρ_a)² + (1 - ρ_g)²)``, ≈ ``(√c_a + √c_g)²`` for small
bounds. LSE: P rounding does not enter it, so ``atol = atol_a + A_g`` with the golden's
fp32 LSE bound. For bf16 q these widen the backend's own tolerance by ~1e-5; for fp8 q
they are the bound that any two plans' results must meet (the plan-invariance check).

Every bound takes the RMS of the golden's scores, ``score_rms`` (`GoldenCase.score_rms`:
``sm_scale · √576`` on the goldens' N(0, 1) data, 1 at 1/√576, 3.25 at DeepSeek-V3's
scale), which the error model's score and LSE terms scale with (docs/tolerances.md §1).
The golden's own fp32 bounds (``GOLDEN_FP32_OUT``, ``GOLDEN_FP32_LSE``) are generation
checks and stay fixed: the goldens measured at most 0.05 of the output bound and 6e-7 on
the LSE at 1/√576, 0.12 and 1.6e-6 at DeepSeek-V3's scale (manifest provenance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from conformance.numerics.fp8 import is_fp8
from conformance.numerics.tolerances import Tolerance, lse_tolerance_for, tolerance_for


@dataclass(frozen=True)
class GoldenBound:
    """A golden's own error against the fp64 reference r, verified at generation.

    ``|g - r| <= abs + rel * |r|`` elementwise on finite values (±inf and NaN positions
    equal), and ``1 - 2Σgr / Σ(g² + r²) <= cos_diff``.
    """

    abs: float
    rel: float
    cos_diff: float


GOLDEN_FP32_OUT = GoldenBound(abs=1e-5, rel=1e-5, cos_diff=1e-10)
"""Output of a golden with bf16 q: fp32 plan replay, no P rounding."""
GOLDEN_FP32_LSE = GoldenBound(abs=1e-5, rel=0.0, cos_diff=1e-10)
"""LSE of every golden (computed from unrounded P in fp32)."""


def golden_output_bound(
    q_dtype: torch.dtype, kv_dtype: torch.dtype, *, score_rms: float = 1.0
) -> GoldenBound:
    """The bound a golden output satisfies against the fp64 reference (module docstring)."""
    if not is_fp8(q_dtype):
        return GOLDEN_FP32_OUT
    tol = tolerance_for(q_dtype, kv_dtype, "fp32-reference", score_rms=score_rms)
    return GoldenBound(abs=tol.atol / 2, rel=tol.rtol / 2, cos_diff=tol.cos_diff)


def _rho(cos_diff: float) -> float:
    """Largest ‖x - r‖ / ‖r‖ allowed by ``cos(x, r) <= cos_diff``."""
    c = cos_diff
    return (c + math.sqrt(c * c + 2 * c * (1 - c))) / (1 - c)


def combined_cos_diff(c_a: float, c_g: float) -> float:
    """Bound on cos(a, g) from cos(a, r) <= c_a and cos(g, r) <= c_g (module docstring)."""
    ra, rg = _rho(c_a), _rho(c_g)
    if ra + rg >= 1:
        return 1.0
    return (ra + rg) ** 2 / ((1 - ra) ** 2 + (1 - rg) ** 2)


def output_tolerance(
    q_dtype: torch.dtype, kv_dtype: torch.dtype, kind: str, *, score_rms: float = 1.0
) -> Tolerance:
    """Tolerance of a backend's output (of numerics `kind`) against a golden output whose
    scores have RMS `score_rms` (`GoldenCase.score_rms`)."""
    backend = tolerance_for(q_dtype, kv_dtype, kind, score_rms=score_rms)
    golden = golden_output_bound(q_dtype, kv_dtype, score_rms=score_rms)
    rel = (backend.rtol / 2 + golden.rel) / (1 - golden.rel)
    abs_ = backend.atol / 2 + golden.abs + rel * golden.abs
    return Tolerance(
        atol=2 * abs_,
        rtol=2 * rel,
        cos_diff=combined_cos_diff(backend.cos_diff, golden.cos_diff),
    )


def lse_tolerance(
    q_dtype: torch.dtype, kv_dtype: torch.dtype, kind: str, *, score_rms: float = 1.0
) -> Tolerance:
    """Tolerance of a backend's LSE against a golden LSE whose scores have RMS `score_rms`."""
    backend = lse_tolerance_for(q_dtype, kv_dtype, kind, score_rms=score_rms)
    golden = GOLDEN_FP32_LSE
    return Tolerance(
        atol=backend.atol + golden.abs,
        rtol=backend.rtol + golden.rel,
        cos_diff=combined_cos_diff(backend.cos_diff, golden.cos_diff),
    )


@dataclass(frozen=True)
class BoundCheck:
    """How a golden compares with the fp64 reference: worst excess and the cosine."""

    ok: bool
    max_abs_err: float
    worst_ratio: float  # max |g - r| / (abs + rel |r|): <= 1 passes
    cos_diff: float
    problem: str = ""


def check_bound(golden: torch.Tensor, reference: torch.Tensor, bound: GoldenBound) -> BoundCheck:
    """Check ``golden`` against ``reference`` under `bound` (fp64 arithmetic)."""
    g = golden.detach().to("cpu", torch.float64).reshape(-1)
    r = reference.detach().to("cpu", torch.float64).reshape(-1)
    if g.shape != r.shape:
        return BoundCheck(False, math.inf, math.inf, 1.0, f"shape {g.shape} != {r.shape}")
    infinite = torch.isinf(g) | torch.isinf(r)
    special = torch.isnan(g) | torch.isnan(r) | infinite
    mismatch = (torch.isnan(g) != torch.isnan(r)) | (infinite & (g != r))
    if bool(mismatch.any()):
        count = int(mismatch.sum())
        return BoundCheck(False, math.inf, math.inf, 1.0, f"{count} NaN/inf position(s) differ")
    gf, rf = g[~special], r[~special]
    err = (gf - rf).abs()
    limit = bound.abs + bound.rel * rf.abs()
    ratio = float((err / limit).max()) if len(err) else 0.0
    denom = float((gf * gf + rf * rf).sum())
    cos = 1.0 - 2.0 * float((gf * rf).sum()) / denom if denom > 0 else 0.0
    max_abs = float(err.max()) if len(err) else 0.0
    problems = []
    if ratio > 1:
        problems.append(f"|g - r| reaches {ratio:.3g} x the bound {bound.abs:g} + {bound.rel:g}|r|")
    if cos > bound.cos_diff:
        problems.append(f"cos diff {cos:.3g} exceeds {bound.cos_diff:.3g}")
    return BoundCheck(not problems, max_abs, ratio, cos, "; ".join(problems))
