"""The tolerance-headroom chart: an inline SVG bar chart, no script, no external resource.

One group of bars per numerics case (the worst cases first), one bar per backend: measured
error ÷ tolerance (`conformance.signoff.headroom`). A dashed line marks 1 (the tolerance);
bars past the right edge are cut and marked with their value.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

PALETTE: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf")
MAX_CASES = 40
LABEL_WIDTH = 430
PLOT_WIDTH = 520
BAR = 8
GAP = 8
TOP = 46
MAX_LABEL_CHARS = 72


def _scale_max(ratios: Sequence[float]) -> float:
    finite = [ratio for ratio in ratios if ratio < float("inf")]
    worst = max(finite, default=1.0)
    return min(max(1.25, worst * 1.1), 4.0)


def headroom_svg(rows: Sequence[dict[str, Any]], backends: Sequence[str]) -> str:
    """The chart of ``rows`` (`headroom.headroom_rows` of every backend) as an SVG element."""
    if not rows:
        return ""
    colours = {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(backends)}
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["backend"]] = row
    order = sorted(by_case, key=lambda case: -max(r["ratio"] for r in by_case[case].values()))
    shown = order[:MAX_CASES]
    present = [name for name in backends if any(name in by_case[case] for case in shown)]
    group = len(present) * BAR + GAP
    height = TOP + group * len(shown) + 30
    width = LABEL_WIDTH + PLOT_WIDTH + 70
    scale = _scale_max([row["ratio"] for row in rows])

    def x(value: float) -> float:
        return LABEL_WIDTH + PLOT_WIDTH * min(value, scale) / scale

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" font-family="system-ui,sans-serif" '
        'font-size="11"><title>measured error / tolerance per numerics case</title>'
    ]
    for index, name in enumerate(present):  # legend
        left = LABEL_WIDTH + index * 110
        parts.append(
            f'<rect x="{left}" y="6" width="12" height="10" fill="{colours[name]}"/>'
            f'<text x="{left + 16}" y="15">{escape(name)}</text>'
        )
    ticks = [step / 4 for step in range(int(scale * 4) + 1)]
    for tick in ticks:
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{TOP - 6}" x2="{x(tick):.1f}" y2="{height - 24}" '
            'stroke="#e3e3e3"/>'
            f'<text x="{x(tick):.1f}" y="{height - 10}" text-anchor="middle">{tick:g}</text>'
        )
    parts.append(
        f'<line x1="{x(1.0):.1f}" y1="{TOP - 12}" x2="{x(1.0):.1f}" y2="{height - 24}" '
        'stroke="#c00" stroke-dasharray="4 3"/>'
        f'<text x="{x(1.0) + 4:.1f}" y="{TOP - 14}" fill="#c00">tolerance</text>'
    )
    for position, case in enumerate(shown):
        top = TOP + position * group
        label = case if len(case) <= MAX_LABEL_CHARS else case[: MAX_LABEL_CHARS - 1] + "…"
        parts.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{top + len(present) * BAR / 2 + 4:.1f}" '
            f'text-anchor="end"><title>{escape(case)}</title>{escape(label)}</text>'
        )
        for lane, name in enumerate(present):
            row = by_case[case].get(name)
            if row is None:
                continue
            ratio = row["ratio"]
            y = top + lane * BAR
            fill = colours[name]
            outline = ' stroke="#c00" stroke-width="1.5"' if ratio > 1 else ""
            detail = ", ".join(f"{key} {value:.3g}" for key, value in row["figures"].items())
            parts.append(
                f'<rect x="{LABEL_WIDTH}" y="{y}" width="{x(ratio) - LABEL_WIDTH:.1f}" '
                f'height="{BAR - 1}" fill="{fill}"{outline}><title>{escape(name)} {escape(case)}: '
                f"{escape(detail)}</title></rect>"
            )
            if ratio > scale:
                parts.append(
                    f'<text x="{x(scale) + 3:.1f}" y="{y + BAR - 1}" fill="#c00">'
                    f"{ratio:.3g}▸</text>"
                )
    parts.append("</svg>")
    return "".join(parts)


def omitted_cases(rows: Sequence[dict[str, Any]]) -> int:
    """How many cases the chart leaves out (it draws the `MAX_CASES` worst)."""
    return max(0, len({row["case"] for row in rows}) - MAX_CASES)
