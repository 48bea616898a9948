"""Machine paths out of messages: reports speak of files relative to the repository.

A message from pytest or from the sign-off may name an absolute path: of this checkout, or of
the machine a run was made on. `relative_text` drops the part before a top-level directory of
the repository (``tests/``, ``conformance/``, ...) and shortens installed packages to
``<site-packages>/``; `relative_document` does so for every string of a JSON-ready value.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

TOP_LEVEL = ("tests", "conformance", "backends", "kernels", "benchmarks", "reports", "scripts")
_SEGMENT = r"[^\s/:'\"()<>,;=]+"
_REPOSITORY_PATH = re.compile(rf"(?<![\w.~-])(?:/{_SEGMENT})+?/(?=(?:{'|'.join(TOP_LEVEL)})/)")
_PACKAGES_PATH = re.compile(rf"(?<![\w.~-])(?:/{_SEGMENT})+?/(site-packages|dist-packages)/")


def relative_text(text: str, root: Path | None = None) -> str:
    """``text`` with absolute machine paths made relative (see the module docstring)."""
    if root is not None:
        for prefix in {str(root), str(root.resolve())}:
            if prefix not in ("", "/"):
                text = text.replace(prefix.rstrip("/") + "/", "")
    text = _PACKAGES_PATH.sub(lambda match: f"<{match.group(1)}>/", text)
    return _REPOSITORY_PATH.sub("", text)


def relative_document(value: Any, root: Path | None = None) -> Any:
    """``value`` (dicts, lists, strings) with `relative_text` applied to every string."""
    if isinstance(value, str):
        return relative_text(value, root)
    if isinstance(value, dict):
        return {key: relative_document(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [relative_document(item, root) for item in value]
    return value
