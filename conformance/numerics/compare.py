"""Comparing an actual tensor with an expected one: NaN/Inf positions, abs-or-rel, cosine.

The checks follow the idea of FlashMLA's ``check_is_allclose``:

1. shapes are equal, and ``actual`` has the expected dtype;
2. NaN positions are equal, and ±inf positions and signs are equal;
3. on the remaining (finite) pairs, every element satisfies ``|a - b| <= atol`` or
   ``|a - b| <= rtol * |b|`` (``b`` expected);
4. the cosine difference ``1 - 2Σab / Σ(a² + b²)`` over the finite pairs is at most
   ``cos_diff`` (0 when both are all-zero).

All arithmetic is fp64. `compare` returns a `CompareReport`; `assert_close` raises
AssertionError with the report's message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from conformance.numerics.tolerances import Tolerance


@dataclass(frozen=True)
class Element:
    """One element of interest: its index, both values, and its errors."""

    index: tuple[int, ...]
    actual: float
    expected: float
    abs_err: float
    rel_err: float

    def __str__(self) -> str:
        return (
            f"index {self.index}: actual {self.actual:.6g}, expected {self.expected:.6g}, "
            f"abs err {self.abs_err:.3g}, rel err {self.rel_err:.3g}"
        )


@dataclass(frozen=True)
class CompareReport:
    """Outcome of one comparison; `ok` is True iff every check passed."""

    name: str
    tol: Tolerance
    numel: int
    problems: tuple[str, ...] = ()
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    cos_diff: float = 0.0
    mismatches: int = 0
    worst: tuple[Element, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.problems

    def message(self) -> str:
        """A readable multi-line summary: verdict, failed checks, statistics, worst elements."""
        verdict = "ok" if self.ok else "MISMATCH"
        lines = [f"{self.name}: {verdict} ({self.numel} elements; {self.tol})"]
        lines += [f"  - {p}" for p in self.problems]
        lines.append(
            f"  max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g}, "
            f"cos diff {self.cos_diff:.3g}, {self.mismatches} element(s) outside abs-or-rel"
        )
        if self.worst:
            lines.append("  worst elements:")
            lines += [f"    {e}" for e in self.worst]
        return "\n".join(lines)


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Multi-index of a flat (row-major) position."""
    idx = []
    for size in reversed(shape):
        idx.append(flat % size if size else 0)
        flat //= size if size else 1
    return tuple(reversed(idx))


def _elements(
    flat: torch.Tensor, a: torch.Tensor, b: torch.Tensor, shape: tuple[int, ...]
) -> tuple[Element, ...]:
    """Describe the elements at flat positions `flat` of the flattened fp64 `a`, `b`."""
    out = []
    for pos in flat.tolist():
        av, bv = float(a[pos]), float(b[pos])
        err = abs(av - bv)
        rel = err / abs(bv) if bv != 0 else (0.0 if err == 0 else float("inf"))
        out.append(Element(_index(pos, shape), av, bv, err, rel))
    return tuple(out)


def compare(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    tol: Tolerance,
    name: str = "tensor",
    dtype: torch.dtype | None = None,
    worst_k: int = 5,
) -> CompareReport:
    """Compare `actual` with `expected` under `tol`; see the module docstring.

    `dtype` is the dtype `actual` must have; by default ``expected.dtype``. Passing it lets
    a bf16 result be compared with an fp64 reference without rounding the reference.
    """
    want = expected.dtype if dtype is None else dtype
    shape = tuple(expected.shape)
    problems: list[str] = []
    if tuple(actual.shape) != shape:
        problems.append(f"shape: expected {shape}, found {tuple(actual.shape)}")
        return CompareReport(name, tol, expected.numel(), tuple(problems))
    if actual.dtype != want:
        problems.append(f"dtype: expected {want}, found {actual.dtype}")
    a = actual.detach().to("cpu", torch.float64).reshape(-1)
    b = expected.detach().to("cpu", torch.float64).reshape(-1)
    bad_nan = torch.isnan(a) != torch.isnan(b)
    bad_inf = (torch.isinf(a) | torch.isinf(b)) & (a != b) & ~torch.isnan(a) & ~torch.isnan(b)
    bad_special = bad_nan | bad_inf
    worst: list[Element] = []
    if bool(bad_special.any()):
        where = torch.nonzero(bad_special).flatten()
        problems.append(
            f"NaN/Inf positions differ at {len(where)} element(s), first at "
            f"{_index(int(where[0]), shape)}"
        )
        worst += _elements(where[:worst_k], a, b, shape)
    finite = torch.isfinite(a) & torch.isfinite(b)
    af, bf = a[finite], b[finite]
    err = (af - bf).abs()
    bound = torch.maximum(torch.full_like(bf, tol.atol), tol.rtol * bf.abs())
    fails = err > bound
    mismatches = int(fails.sum())
    max_abs = float(err.max()) if len(err) else 0.0
    rel = torch.where(bf != 0, err / bf.abs(), torch.where(err == 0, 0.0, float("inf")))
    max_rel = float(rel.max()) if len(rel) else 0.0
    denom = float((af * af + bf * bf).sum())
    cos = 1.0 - 2.0 * float((af * bf).sum()) / denom if denom > 0 else 0.0
    if mismatches:
        problems.append(
            f"{mismatches} of {len(err)} finite element(s) exceed |a-b| <= {tol.atol:.3g} "
            f"or |a-b| <= {tol.rtol:.3g}*|b|"
        )
    if cos > tol.cos_diff:
        problems.append(f"cos diff {cos:.3g} exceeds {tol.cos_diff:.3g}")
    if len(err) and len(worst) < worst_k:
        # Rank finite elements by how far past their own bound they are.
        excess = torch.where(bound > 0, err / bound, torch.where(err > 0, float("inf"), 0.0))
        order = torch.argsort(excess, descending=True)[: worst_k - len(worst)]
        positions = torch.nonzero(finite).flatten()[order]
        worst += _elements(positions, a, b, shape)
    return CompareReport(
        name=name,
        tol=tol,
        numel=expected.numel(),
        problems=tuple(problems),
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        cos_diff=cos,
        mismatches=mismatches,
        worst=tuple(worst),
    )


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    tol: Tolerance,
    name: str,
    dtype: torch.dtype | None = None,
    worst_k: int = 5,
) -> CompareReport:
    """`compare`, raising AssertionError with the report's message when a check fails."""
    __tracebackhide__ = True
    report = compare(actual, expected, tol=tol, name=name, dtype=dtype, worst_k=worst_k)
    if not report.ok:
        raise AssertionError(report.message())
    return report
