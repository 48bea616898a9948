"""The rules a page of ``docs/`` lists, for the selftests that hold a rule table to its docs.

A rule is listed as a bullet or a numbered item that starts with its bold code, followed by
its one line of doc (which may wrap): ``- **I4** ...``, ``10. **V10** ...`` or
``- **SIGN001** ...``; or as a row of a Markdown table whose first cell is its code:
``| CAM001 | error | ... |``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_ROW = re.compile(r"^\| ([A-Z]+\d+) \|(.*)\|\s*$", re.M)
_ITEM = re.compile(r"^(?:-|\d+\.) \*\*([A-Z]+\d+)\*\* (.*?)(?=^(?:-|\d+\.) |^\s*$)", re.M | re.S)


def section(page: str, heading: str) -> str:
    """The text under ``## {heading}`` of ``docs/{page}``, up to the next ``## `` heading."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return text.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]


def listed_rules(page: str, heading: str) -> list[tuple[str, str]]:
    """(code, doc with whitespace folded) of each rule under ``## {heading}`` of
    ``docs/{page}``, in order."""
    found = _ITEM.findall(section(page, heading) + "\n\n")
    return [(code, " ".join(doc.split())) for code, doc in found]


def tabled_rules(page: str, heading: str) -> list[tuple[str, ...]]:
    """(code, the other cells stripped...) of each table row under ``## {heading}`` of
    ``docs/{page}`` whose first cell is a rule code, in order."""
    rows = _ROW.findall(section(page, heading))
    return [(code, *(cell.strip() for cell in rest.split("|"))) for code, rest in rows]
