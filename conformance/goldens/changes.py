"""What changed between two goldens' contents (for `generate`'s report)."""

from __future__ import annotations

from typing import Any

import torch

# Two generations of one golden on different CPUs (other SIMD kernels, other summation
# order) agree to fp32 rounding only. A float buffer counts as unchanged when every element
# is within this bound of the committed one: the bf16-q generation bound against the fp64
# reference (`conformance.goldens.tolerance`), far below any backend tolerance.
REGENERATION_ATOL = 1e-5
REGENERATION_RTOL = 1e-5


def _describe_tensor(name: str, old: torch.Tensor, new: torch.Tensor) -> str | None:
    if old.dtype != new.dtype or old.shape != new.shape:
        return f"{name}: {old.dtype} {tuple(old.shape)} -> {new.dtype} {tuple(new.shape)}"
    if old.dtype.is_floating_point:
        a, b = old.to(torch.float64), new.to(torch.float64)
        nan_moved = int((torch.isnan(a) != torch.isnan(b)).sum())
        both = ~torch.isnan(a) & ~torch.isnan(b)
        same_inf = (a == b) | ~(torch.isinf(a) | torch.isinf(b))
        inf_moved = int((~same_inf & both).sum())
        finite = both & torch.isfinite(a) & torch.isfinite(b)
        delta = (a[finite] - b[finite]).abs()
        diff = float(delta.max()) if bool(finite.any()) else 0.0
        bound = REGENERATION_ATOL + REGENERATION_RTOL * a[finite].abs()
        if not nan_moved and not inf_moved and bool((delta <= bound).all()):
            return None  # fp32 rounding of another CPU's kernels, not a change
        extra = (
            f", {nan_moved} NaN and {inf_moved} inf position(s) moved"
            if (nan_moved or inf_moved)
            else ""
        )
        return f"{name}: max |diff| {diff:.3g}{extra}"
    if torch.equal(old, new):
        return None
    differ = old != new
    delta = int((old.to(torch.int64) - new.to(torch.int64)).abs().max())
    return f"{name}: {int(differ.sum())} of {old.numel()} entries differ (max |diff| {delta})"


def describe_changes(
    old: tuple[dict[str, torch.Tensor], dict[str, Any]],
    new: tuple[dict[str, torch.Tensor], dict[str, Any]],
) -> list[str]:
    """Per-buffer differences between two goldens' contents (empty when identical)."""
    (old_t, old_m), (new_t, new_m) = old, new
    lines = []
    for name in sorted(set(old_t) | set(new_t)):
        if name not in new_t:
            lines.append(f"{name}: removed")
        elif name not in old_t:
            lines.append(f"{name}: added")
        else:
            line = _describe_tensor(name, old_t[name], new_t[name])
            if line:
                lines.append(line)
    changed = []
    for key in sorted(set(old_m) | set(new_m)):
        a, b = old_m.get(key), new_m.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changed += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            changed.append(key)
    if changed:
        lines.append(f"metadata changed: {', '.join(changed)}")
    return lines
