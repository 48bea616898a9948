"""Tolerance headroom of the numerics cases: measured error ÷ tolerance, per case and backend.

Family C's golden comparisons record, per compared tensor ``<p>`` (``out``, ``lse``), JUnit
properties ``<p>_max_abs_err``, ``<p>_max_rel_err``, ``<p>_cos_diff`` and — from the runs that
record them — the tolerance ``<p>_atol``, ``<p>_rtol``, ``<p>_cos_tol`` and the exact
abs-or-rel figure ``<p>_err_over_tol`` (the worst element's error ÷ its own bound). A case's
ratio is the largest of its figures: below 1 it passes with room to spare, above 1 it fails.
When only ``atol``/``rtol`` are recorded, ``min(max_abs_err/atol, max_rel_err/rtol)`` stands
in for the abs-or-rel figure (an upper bound of it). Values that are missing, not numbers,
negative or not finite are left out; a case with no usable figure is counted, not drawn.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from conformance.signoff.model import CaseResult

PREFIXES: tuple[str, ...] = ("out", "lse")


def _number(properties: Mapping[str, str], name: str) -> float | None:
    try:
        value = float(properties[name])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _ratio(value: float | None, bound: float | None) -> float | None:
    if value is None or bound is None:
        return None
    if bound == 0:
        return 0.0 if value == 0 else math.inf
    return value / bound


def case_figures(properties: Mapping[str, str]) -> dict[str, float]:
    """``{"out abs-or-rel": r, "out cos": r, ...}`` from one testcase's properties."""
    figures: dict[str, float] = {}
    for prefix in PREFIXES:
        exact = _number(properties, f"{prefix}_err_over_tol")
        bounds = [
            _ratio(
                _number(properties, f"{prefix}_max_abs_err"), _number(properties, f"{prefix}_atol")
            ),
            _ratio(
                _number(properties, f"{prefix}_max_rel_err"), _number(properties, f"{prefix}_rtol")
            ),
        ]
        known = [value for value in bounds if value is not None]
        elementwise = exact if exact is not None else (min(known) if len(known) == 2 else None)
        if elementwise is not None:
            figures[f"{prefix} abs-or-rel"] = elementwise
        cosine = _ratio(
            _number(properties, f"{prefix}_cos_diff"), _number(properties, f"{prefix}_cos_tol")
        )
        if cosine is not None:
            figures[f"{prefix} cos"] = cosine
    return figures


def is_numerics_case(properties: Mapping[str, str]) -> bool:
    """Whether a testcase recorded error figures."""
    return any(f"{prefix}_max_abs_err" in properties for prefix in PREFIXES)


def headroom_rows(backend: str, cases: Iterable[CaseResult]) -> tuple[list[dict[str, Any]], int]:
    """One row per numerics case with a usable figure, and how many had none."""
    rows, without = [], 0
    for case in cases:
        if not is_numerics_case(case.properties):
            continue
        figures = case_figures(case.properties)
        if not figures:
            without += 1
            continue
        worst = max(figures, key=lambda name: figures[name])
        rows.append(
            {
                "backend": backend,
                "id": case.node_id,
                "case": case.node_id.rsplit("::", 1)[-1].removeprefix("test_"),
                "outcome": case.outcome.value,
                "ratio": figures[worst],
                "worst": worst,
                "figures": figures,
            }
        )
    return rows, without
