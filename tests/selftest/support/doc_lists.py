"""The rules a page of ``docs/`` lists, for the selftests that hold a rule table to its docs.

A rule is listed as a bullet or a numbered item that starts with its bold code, followed by
its one line of doc (which may wrap): ``- **I4** ...``, ``10. **V10** ...`` or
``- **SIGN001** ...``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_ITEM = re.compile(r"^(?:-|\d+\.) \*\*([A-Z]+\d+)\*\* (.*?)(?=^(?:-|\d+\.) |^\s*$)", re.M | re.S)


def listed_rules(page: str, heading: str) -> list[tuple[str, str]]:
    """(code, doc with whitespace folded) of each rule under ``## {heading}`` of
    ``docs/{page}``, in order."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    return [(code, " ".join(doc.split())) for code, doc in _ITEM.findall(section + "\n\n")]
