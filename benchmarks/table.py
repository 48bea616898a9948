"""Fixed-width text tables of benchmark rows (the planners' console summaries)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Column = tuple[str, str, int, str]
"""``(title, row key, width, format)``: e.g. ``("median ms", "median_ms", 10, ".2f")``."""


def fixed_width_table(columns: Sequence[Column], rows: Sequence[Mapping[str, Any]]) -> str:
    """A header, a rule and one line per row; every cell right-aligned to its column's width."""
    header = " ".join(f"{title:>{width}}" for title, _, width, _ in columns)
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(" ".join(f"{row[key]:>{width}{spec}}" for _, key, width, spec in columns))
    return "\n".join(lines)
