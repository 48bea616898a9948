"""fp8 (e4m3) helpers: dtype predicates, the arch's flavour, per-tensor quantisation.

Two e4m3 flavours exist. ``float8_e4m3fn`` (OCP; max 448, one NaN encoding per sign, no
inf) is what gfx950 and NVIDIA use; ``float8_e4m3fnuz`` (max 240, a single NaN, no negative
zero) is what gfx942 (MI300) uses. Both carry 3 mantissa bits, so their unit roundoff is
2^-4. Every e4m3 value is exactly representable in bf16, fp32 and fp64, so dequantising
``x_fp8.to(float) * scale`` is exact in fp64 (and exact in fp32 when the scale is a power
of two).

Casting a value above the format's max to fnuz gives NaN (fn saturates in current torch);
`quantize_per_tensor` therefore clamps before the cast. NaN inputs stay NaN, which keeps
NaN-poisoned cache slots poisoned after quantisation.
"""

from __future__ import annotations

import torch

from conformance.applicability import FNUZ_ARCHES

FP8_E4M3_DTYPES: tuple[torch.dtype, ...] = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def is_fp8(dtype: torch.dtype) -> bool:
    """True for every 8-bit floating dtype (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, ...)."""
    return dtype.is_floating_point and dtype.itemsize == 1


def fp8_dtype_for_arch(arch: str) -> torch.dtype:
    """The e4m3 flavour an architecture computes with: e4m3fnuz on gfx942, e4m3fn otherwise."""
    return torch.float8_e4m3fnuz if arch in FNUZ_ARCHES else torch.float8_e4m3fn


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of an fp8 dtype (448 for e4m3fn, 240 for e4m3fnuz)."""
    if not is_fp8(dtype):
        raise ValueError(f"dtype: expected an fp8 dtype, found {dtype}")
    return float(torch.finfo(dtype).max)


def scale_value(scale: float | torch.Tensor) -> float:
    """A per-tensor scale as a Python float; accepts a float or a one-element tensor."""
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError(
                f"scale: expected a per-tensor scale (one element), found shape "
                f"{tuple(scale.shape)}"
            )
        return float(scale.reshape(()).item())
    return float(scale)


def quantize_per_tensor(
    x: torch.Tensor, dtype: torch.dtype, scale: float | torch.Tensor | None = None
) -> tuple[torch.Tensor, float]:
    """Quantise `x` to fp8 `dtype` with one scale: ``x ≈ x_fp8.to(float) * scale``.

    With `scale` None the scale is ``amax / fp8_max(dtype)`` over the finite entries of `x`
    (rounded to fp32, as kernels receive it), so the largest magnitude lands on the format's
    max; an all-zero tensor gets scale 1. Values are clamped to ±max before the cast; NaN
    stays NaN. Returns ``(x_fp8, scale)`` with the scale as a Python float.
    """
    fmax = fp8_max(dtype)
    xf = x.to(torch.float32)
    if scale is None:
        finite_abs = torch.where(torch.isfinite(xf), xf.abs(), torch.zeros_like(xf))
        amax = float(finite_abs.max()) if x.numel() else 0.0
        scale_f = amax / fmax if amax > 0.0 else 1.0
    else:
        scale_f = scale_value(scale)
    if not (scale_f > 0.0 and scale_f != float("inf")):
        raise ValueError(f"scale: expected a positive finite value, found {scale_f}")
    scale_f = float(torch.tensor(scale_f, dtype=torch.float32))
    q = (xf / scale_f).clamp(-fmax, fmax).to(dtype)
    return q, scale_f


def dequantize(
    x: torch.Tensor, scale: float | torch.Tensor = 1.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``x.to(dtype) * scale``: exact for fp8 inputs when `dtype` is fp64."""
    return x.to(dtype) * scale_value(scale)


def round_through(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round `x` to `dtype` and back (round-to-nearest-even), keeping x's dtype."""
    return x.to(dtype).to(x.dtype)
