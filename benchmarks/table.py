"""Fixed-width text tables of benchmark rows (the planners' console summaries)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from string import Formatter
from typing import Any


def fixed_width_table(
    titles: Sequence[str], row_format: str, rows: Sequence[Mapping[str, Any]]
) -> str:
    """A header, a rule and one line per row.

    `row_format` formats one row (``str.format_map``): one ``{key:>WIDTH...}`` field per
    column, separated by single spaces; `titles` head the columns, right-aligned to the same
    widths.
    """
    widths = []
    for _, key, spec, _ in Formatter().parse(row_format):
        if key is not None:
            width = re.match(r">(\d+)", spec or "")
            if width is None:
                raise ValueError(f"row format field {{{key}:{spec}}}: no right-aligned width")
            widths.append(int(width.group(1)))
    if len(widths) != len(titles):
        raise ValueError(f"{len(titles)} titles for the {len(widths)} fields of the row format")
    header = " ".join(f"{title:>{width}}" for title, width in zip(titles, widths, strict=True))
    return "\n".join([header, "-" * len(header), *(row_format.format_map(r) for r in rows)])
