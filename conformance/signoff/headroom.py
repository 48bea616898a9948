"""Tolerance headroom of the numerics cases: measured error ÷ tolerance, per case and backend.

Family C's golden comparisons record, per compared tensor ``<p>`` (``out``, ``lse``), JUnit
properties ``<p>_max_abs_err``, ``<p>_max_rel_err``, ``<p>_cos_diff`` and — from the runs that
record them — the tolerance ``<p>_atol``, ``<p>_rtol``, ``<p>_cos_tol`` and the exact
abs-or-rel figure ``<p>_err_over_tol`` (the worst element's error ÷ its own bound). A case's
ratio is the largest of its figures: below 1 it passes with room to spare, above 1 it fails.
When only ``atol``/``rtol`` are recorded, ``min(max_abs_err/atol, max_rel_err/rtol)`` stands
in for the abs-or-rel figure (an upper bound of it). Values that are missing, not numbers,
negative or not finite are left out; a case with no usable figure is counted, not drawn.
The tests that compared one golden case share one row per backend: the worst of them.
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


def _split_id(node_id: str) -> tuple[str, str | None]:
    """``("decode_matches_golden", "gfx942-...")`` from a node id; no parameter: None."""
    name = node_id.rsplit("::", 1)[-1].removeprefix("test_")
    if name.endswith("]") and "[" in name:
        test, _, parameter = name[:-1].partition("[")
        return test, parameter
    return name, None


def one_row_per_case(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per golden case: the worst of the tests that compared it.

    ``decode_matches_golden[X]`` and ``decode_is_plan_invariant[X]`` compare decodes of the
    same golden case ``X`` (they record identical figures where the plan does not change the
    arithmetic): one row ``X``, the worst figure of the two, both tests in ``tests`` and both
    ids in ``ids``. A test without a parameter keeps its own row.
    """
    by_case: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        test, parameter = _split_id(row["id"])
        by_case.setdefault(parameter or test, []).append({**row, "tests": [test]})
    merged = []
    for case, group in by_case.items():
        worst = max(group, key=lambda row: row["ratio"])
        merged.append(
            {
                **worst,
                "case": case,
                "ids": [row["id"] for row in group],
                "tests": [test for row in group for test in row["tests"]],
            }
        )
    return merged


def headroom_rows(backend: str, cases: Iterable[CaseResult]) -> tuple[list[dict[str, Any]], int]:
    """One row per golden case with a usable figure (`one_row_per_case`), and how many
    numerics testcases had none."""
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
    return one_row_per_case(rows), without
