"""``python -m conformance backends``: each backend and whether it can run here."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``backends`` subcommand."""
    parser.add_argument("--json", action="store_true", help="print JSON")


def _rows() -> list[dict[str, Any]]:
    from backends.registry import backend_names, get_backend

    rows = []
    for name in backend_names():
        try:
            avail = get_backend(name).availability()
            available, reason = bool(avail.available), avail.reason
        except Exception as exc:  # a broken backend is a row, not a traceback
            available, reason = False, f"availability check raised {type(exc).__name__}: {exc}"
        rows.append({"backend": name, "available": available, "reason": reason})
    return rows


def main(args: argparse.Namespace) -> int:
    """Print one line per backend: name, available or the reason it is not."""
    try:
        rows = _rows()
    except ModuleNotFoundError as exc:
        print(
            f"python -m conformance backends: {sys.executable} has no Python package "
            f"{exc.name!r}, which every backend needs; install the requirement set "
            f"requirements/cpu.txt (pip install -r requirements/cpu.txt), or use an "
            f"interpreter that has your vendor torch",
            file=sys.stderr,
        )
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            state = "available" if row["available"] else f"not available: {row['reason']}"
            print(f"{row['backend']:<10} {state}")
    return 0
