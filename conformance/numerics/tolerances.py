"""Tolerances for MLA decode outputs against the fp64 reference, from an error model.

Every number here is computed from the error model written down, with its derivation, in
``docs/tolerances.md``; none was tuned on a kernel's output. The model's inputs are unit
roundoffs (bf16 ``2^-8``, e4m3 ``2^-4``, fp32 ``2^-24``), the dot length K = 576, the
longest context covered (32k tokens), and the data scale (RMS of the dequantised V entries
and of the scores; both 1 for the suite's standard N(0, 1) data with sm_scale = 1/√576).

A *kind* names how a backend computes:

- ``"fp32-reference"``: fp32 arithmetic on exactly dequantised operands (the CPU reference
  backend); only the output is rounded to bf16, and P is rounded to fp8 when q is fp8
  (AITER's semantics).
- ``"tensor-core"``: bf16 operands to both dots with fp32 accumulation (a Triton kernel);
  P is rounded to bf16 before ``P @ V`` (to fp8 when q is fp8). When q and the cache are
  both fp8, ``q·k`` may run on fp8 tensor cores, whose accumulation keeps ~14 bits.
- ``"dequant-bf16"``: tensor-core, with an fp8 cache dequantised (times ``kv_scale``) into
  bf16 operands before the dots (FlashInfer's fa2/fa3 kernels): K and V carry one bf16
  rounding each (docs/tolerances.md §2).

The output check is element-wise ``|a - b| <= atol or |a - b| <= rtol * |b|`` plus the
cosine bound ``1 - 2Σab / Σ(a² + b²) <= cos_diff`` (`conformance.numerics.compare`). LSE (fp32, not
rounded) has its own, tighter tolerances: `lse_tolerance_for`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from conformance.numerics.fp8 import is_fp8

U_BF16 = 2.0**-8
U_E4M3 = 2.0**-4
U_FP32 = 2.0**-24
# Hopper fp8 tensor cores keep about 14 bits when they add an MMA's products into the
# accumulator (DeepSeek-V3 technical report, §3.3.2); one MMA instruction takes 32 fp8
# products of the dot. docs/tolerances.md §2 gives the term this adds to the scores.
U_FP8_MMA = 2.0**-14
FP8_MMA_K = 32

KINDS: tuple[str, ...] = ("fp32-reference", "tensor-core", "dequant-bf16")


@dataclass(frozen=True)
class Tolerance:
    """Element-wise abs-or-rel bounds plus a cosine-difference bound."""

    atol: float
    rtol: float
    cos_diff: float

    def __str__(self) -> str:
        return f"atol={self.atol:.3g}, rtol={self.rtol:.3g}, cos_diff={self.cos_diff:.3g}"


@dataclass(frozen=True)
class ErrorModel:
    """The assumptions behind the tolerances (docs/tolerances.md §1)."""

    qk_dim: int = 576  # K, length of the q·k dot
    max_context: int = 32768  # longest context L the bounds cover
    value_rms: float = 1.0  # RMS of dequantised V entries (times kv_scale)
    score_rms: float = 1.0  # RMS of the scores S
    tail: float = 5.0  # |v| <= tail * value_rms for every V entry
    lam: float = 7.0  # probabilistic rounding constant: sum error <= lam * sqrt(n) * u
    margin: float = 1.5  # safety factor on the statistical (cosine and LSE) bounds
    lse_rms_min: float = 0.5  # smallest RMS of a batch's finite LSE values


@dataclass(frozen=True)
class ErrorBudget:
    """The terms of the error model for one (q dtype, kv dtype, kind)."""

    u_out: float  # output rounding (bf16)
    u_p: float  # rounding of P before P @ V (0: none)
    u_acc: float  # accumulation unit roundoff of the dots
    score_err: float  # max |δS| from the q·k dot and the scale products
    sum_err: float  # relative error of Σ p·v and Σ p over L tokens, plus divides/scales
    abs_fp32: float  # absolute error on O from score_err and sum_err
    abs_p: float  # absolute error on O from rounding P
    lse_err: float  # absolute error on LSE


def _check(q_dtype: torch.dtype, kv_dtype: torch.dtype, kind: str) -> None:
    """Raise ValueError for dtypes or kinds the model does not cover."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, found {kind!r}")
    for field, dtype in (("q_dtype", q_dtype), ("kv_dtype", kv_dtype)):
        if dtype != torch.bfloat16 and not is_fp8(dtype):
            raise ValueError(f"{field}: expected torch.bfloat16 or an fp8 dtype, found {dtype}")


def error_budget(
    q_dtype: torch.dtype, kv_dtype: torch.dtype, kind: str, model: ErrorModel | None = None
) -> ErrorBudget:
    """Evaluate the error model (docs/tolerances.md §2) for one combination."""
    _check(q_dtype, kv_dtype, kind)
    m = model or ErrorModel()
    q8, kv8 = is_fp8(q_dtype), is_fp8(kv_dtype)
    u_acc = U_FP32 if kind == "fp32-reference" else 2 * U_FP32
    if q8:
        u_p = U_E4M3
    elif kind != "fp32-reference":
        u_p = U_BF16
    else:
        u_p = 0.0
    # Scores: |δS| <= (lam√K u_acc + n_scale u_fp32) Σ|q_i k_i| scale, Σ|q_i k_i| scale <= √K s.
    s1 = math.sqrt(m.qk_dim) * m.score_rms
    n_scale = 1 + int(q8) + int(kv8)
    score_err = (m.lam * math.sqrt(m.qk_dim) * u_acc + n_scale * U_FP32) * s1
    if kind != "fp32-reference" and q8 and kv8:
        # fp8 MMA: each of the ceil(K/32) accumulation steps may lose u_fp8_mma of the
        # running magnitude, which is at most S1; truncation is biased, so errors add up.
        score_err += math.ceil(m.qk_dim / FP8_MMA_K) * U_FP8_MMA * s1
    # Σ p·v (accumulated like the dots) and Σ p (fp32), the divide, the kv_scale multiply.
    sqrt_l = math.sqrt(m.max_context)
    sum_err = m.lam * sqrt_l * (u_acc + U_FP32) + (1 + int(kv8)) * U_FP32
    if kind == "dequant-bf16" and kv8:
        # k·kv_scale rounded to bf16: independent relative errors <= u_b on each product of
        # the dot, |δS| <= λ u_b sqrt(Σ (sm q_i k_i)²) ≈ λ u_b σ_s; v·kv_scale rounded: u_b.
        score_err += m.lam * U_BF16 * m.score_rms
        sum_err += U_BF16
    v_max = m.tail * m.value_rms
    abs_fp32 = 2 * v_max * score_err + v_max * sum_err
    abs_p = 0.5 * u_p * v_max
    lse_max = s1 + math.log(m.max_context)
    lse_err = score_err + m.lam * sqrt_l * U_FP32 + 4 * U_FP32 * lse_max
    return ErrorBudget(U_BF16, u_p, u_acc, score_err, sum_err, abs_fp32, abs_p, lse_err)


def tolerance_for(
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
    kind: str,
    *,
    value_rms: float = 1.0,
    score_rms: float = 1.0,
) -> Tolerance:
    """Output tolerance (bf16 output vs the fp64 reference) for one combination.

    ``atol = 2 (abs_fp32 + abs_p)``, ``rtol = 2 u_out``, ``cos_diff = margin (u_out +
    u_p/√3 + score_err + sum_err)² / 2`` (docs/tolerances.md §3). `value_rms` / `score_rms`
    rescale the model for data that is not unit-scale.
    """
    b = error_budget(q_dtype, kv_dtype, kind, ErrorModel(value_rms=value_rms, score_rms=score_rms))
    margin = ErrorModel().margin
    rel = b.u_out + b.u_p / math.sqrt(3) + b.score_err + b.sum_err
    return Tolerance(
        atol=2 * (b.abs_fp32 + b.abs_p),
        rtol=2 * b.u_out,
        cos_diff=margin * rel * rel / 2,
    )


def lse_tolerance_for(
    q_dtype: torch.dtype, kv_dtype: torch.dtype, kind: str, *, score_rms: float = 1.0
) -> Tolerance:
    """LSE tolerance (fp32 LSE vs the fp64 reference); P rounding does not enter the LSE.

    ``atol = margin · lse_err``, ``rtol = 0``, ``cos_diff = margin · lse_err² / (2 ·
    lse_rms_min²)`` (docs/tolerances.md §4).
    """
    model = ErrorModel(score_rms=score_rms)
    b = error_budget(q_dtype, kv_dtype, kind, model)
    return Tolerance(
        atol=model.margin * b.lse_err,
        rtol=0.0,
        cos_diff=model.margin * b.lse_err**2 / (2 * model.lse_rms_min**2),
    )


TABLE_DTYPES: tuple[tuple[torch.dtype, torch.dtype], ...] = (
    (torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float8_e4m3fn),
    (torch.float8_e4m3fn, torch.float8_e4m3fn),
)


def tolerance_table() -> list[tuple[torch.dtype, torch.dtype, str, Tolerance, Tolerance]]:
    """(q dtype, kv dtype, kind, output tolerance, LSE tolerance) for the documented table.

    Both e4m3 flavours share one row: they have the same unit roundoff.
    """
    return [
        (qd, kvd, kind, tolerance_for(qd, kvd, kind), lse_tolerance_for(qd, kvd, kind))
        for qd, kvd in TABLE_DTYPES
        for kind in KINDS
    ]


def _dtype_label(dtype: torch.dtype) -> str:
    """Short table label of a dtype."""
    return "e4m3" if is_fp8(dtype) else "bf16"


def format_table() -> str:
    """The markdown tolerance table of docs/tolerances.md, generated from the model."""
    header = ("q", "kv", "kind", "out atol", "out rtol", "out cos_diff")
    header += ("lse atol", "lse rtol", "lse cos_diff")
    rows = [
        "| " + " | ".join(header) + " |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for qd, kvd, kind, out, lse in tolerance_table():
        rows.append(
            f"| {_dtype_label(qd)} | {_dtype_label(kvd)} | {kind} | {out.atol:.3g} | "
            f"{out.rtol:.3g} | {out.cos_diff:.3g} | {lse.atol:.3g} | {lse.rtol:.3g} | "
            f"{lse.cos_diff:.3g} |"
        )
    return "\n".join(rows)
