"""The tolerance-headroom chart: an inline SVG bar chart, no script, no external resource.

One group of bars per golden case (the worst cases first), one bar per backend: measured
error ÷ tolerance, the worst of the tests that compared the case
(`conformance.signoff.headroom`). The scale is drawn above and below the bars; a dashed line
marks 1 (the tolerance); bars past the right edge are cut and marked with their value. Long
case names wrap onto a second line rather than being cut. A backend whose evidence is STALE
is drawn hatched and pale, and says "stale" in the legend and beside each bar.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

PALETTE: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf")
MAX_CASES = 40
PLOT_WIDTH = 520
BAR = 8
GAP = 8
LINE = 12  # height of one line of a case name
TOP = 56
CHAR_WIDTH = 6.2  # of the 11 px sans-serif labels, generously
WRAP_CHARS = 56
MIN_LABEL_WIDTH = 160


def _scale_max(ratios: Sequence[float]) -> float:
    finite = [ratio for ratio in ratios if ratio < float("inf")]
    worst = max(finite, default=1.0)
    return min(max(1.25, worst * 1.1), 4.0)


def wrap_label(text: str, width: int = WRAP_CHARS) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken after ``-``, ``[`` or ``,``."""
    lines, current = [], ""
    for piece in re.findall(r"[^-\[,]*[-\[,]?", text):
        if current and len(current) + len(piece) > width:
            lines.append(current)
            current = ""
        while len(piece) > width:  # a piece with no break in it
            lines.append(piece[:width])
            piece = piece[width:]
        current += piece
    return [*lines, current] if current else lines or [""]


@dataclass(frozen=True)
class _Axes:
    """Where values fall: the plot starts after the labels and ends at ``scale``."""

    label_width: int
    scale: float

    def x(self, value: float) -> float:
        return self.label_width + PLOT_WIDTH * min(value, self.scale) / self.scale


def _stale_pattern(index: int, colour: str) -> str:
    return (
        f'<pattern id="stale-{index}" width="6" height="6" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="{colour}" '
        'stroke-width="3"/></pattern>'
    )


def headroom_svg(
    rows: Sequence[dict[str, Any]], backends: Sequence[str], *, stale: Collection[str] = ()
) -> str:
    """The chart of ``rows`` (`headroom.headroom_rows` of every backend) as an SVG element;
    the backends named in ``stale`` are drawn as stale evidence."""
    if not rows:
        return ""
    colours = {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(backends)}
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["backend"]] = row
    order = sorted(by_case, key=lambda case: -max(r["ratio"] for r in by_case[case].values()))
    shown = order[:MAX_CASES]
    present = [name for name in backends if any(name in by_case[case] for case in shown)]
    labels = {case: wrap_label(case) for case in shown}
    longest = max(len(line) for lines in labels.values() for line in lines)
    label_width = max(MIN_LABEL_WIDTH, round(longest * CHAR_WIDTH) + 16)
    heights = [max(len(present) * BAR, len(labels[case]) * LINE) + GAP for case in shown]
    height = TOP + sum(heights) + 30
    width = label_width + PLOT_WIDTH + 80
    axes = _Axes(label_width, _scale_max([row["ratio"] for row in rows]))
    x, scale = axes.x, axes.scale
    fills = {
        name: f"url(#stale-{index})" if name in stale else colours[name]
        for index, name in enumerate(backends)
    }

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" font-family="system-ui,sans-serif" '
        'font-size="11" style="max-width:100%;height:auto">'
        "<title>measured error / tolerance per numerics case</title><defs>"
        + "".join(
            _stale_pattern(index, colours[name])
            for index, name in enumerate(backends)
            if name in stale
        )
        + "</defs>"
    ]
    left = label_width
    for name in present:  # legend
        fill = fills[name]
        caption = f"{name} (stale evidence)" if name in stale else name
        parts.append(
            f'<rect x="{left}" y="6" width="12" height="10" fill="{fill}" stroke="{colours[name]}"'
            f'/><text x="{left + 16}" y="15">{escape(caption)}</text>'
        )
        left += 24 + round(len(caption) * CHAR_WIDTH)
    ticks = [step / 4 for step in range(int(scale * 4) + 1)]
    for tick in ticks:
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{TOP - 6}" x2="{x(tick):.1f}" y2="{height - 24}" '
            'stroke="#e3e3e3"/>'
            f'<text x="{x(tick):.1f}" y="{TOP - 9}" text-anchor="middle">{tick:g}</text>'
            f'<text x="{x(tick):.1f}" y="{height - 10}" text-anchor="middle">{tick:g}</text>'
        )
    parts.append(
        f'<line x1="{x(1.0):.1f}" y1="{TOP - 6}" x2="{x(1.0):.1f}" y2="{height - 24}" '
        'stroke="#c00" stroke-dasharray="4 3"/>'
        f'<text x="{x(1.0) + 4:.1f}" y="{TOP - 24}" fill="#c00">tolerance</text>'
    )
    top = TOP
    for case, group_height in zip(shown, heights, strict=True):
        lines = labels[case]
        tests = next(iter(by_case[case].values())).get("tests") or []
        tip = f"{case} ({', '.join(tests)})" if tests else case
        first = top + 9 + (max(len(present) * BAR, len(lines) * LINE) - len(lines) * LINE) / 2
        spans = "".join(
            f'<tspan x="{label_width - 6}" y="{first + index * LINE:.1f}">{escape(line)}</tspan>'
            for index, line in enumerate(lines)
        )
        parts.append(f'<text text-anchor="end"><title>{escape(tip)}</title>{spans}</text>')
        for lane, name in enumerate(present):
            row = by_case[case].get(name)
            if row is not None:
                parts += _bar(row, case, top + lane * BAR, axes, fills[name], name in stale)
        top += group_height
    parts.append("</svg>")
    return "".join(parts)


def _bar(
    row: dict[str, Any], case: str, y: float, axes: _Axes, fill: str, stale: bool
) -> list[str]:
    ratio, name = row["ratio"], row["backend"]
    outline = ' stroke="#c00" stroke-width="1.5"' if ratio > 1 else ""
    faded = ' opacity="0.6"' if stale else ""
    detail = ", ".join(f"{key} {value:.3g}" for key, value in row["figures"].items())
    label = f"{name}{' (STALE evidence)' if stale else ''} {case}: {detail}"
    parts = [
        f'<rect x="{axes.x(0):.1f}" y="{y}" width="{axes.x(ratio) - axes.x(0):.1f}" '
        f'height="{BAR - 1}" fill="{fill}"{outline}{faded}><title>{escape(label)}</title></rect>'
    ]
    if ratio > axes.scale:
        parts.append(
            f'<text x="{axes.x(axes.scale) + 3:.1f}" y="{y + BAR - 1}" fill="#c00">'
            f"{ratio:.3g}▸</text>"
        )
    elif stale:
        parts.append(
            f'<text x="{axes.x(ratio) + 3:.1f}" y="{y + BAR - 1}" font-size="8" fill="#777">'
            "stale</text>"
        )
    return parts


def omitted_cases(rows: Sequence[dict[str, Any]]) -> int:
    """How many cases the chart leaves out (it draws the `MAX_CASES` worst)."""
    return max(0, len({row["case"] for row in rows}) - MAX_CASES)
