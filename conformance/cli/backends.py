"""``python -m conformance backends``: each backend and whether it can run here."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``backends`` subcommand."""
    parser.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    """Print one line per backend: name, available or the reason it is not."""
    from backends.registry import backend_names, get_backend

    rows = []
    for name in backend_names():
        avail = get_backend(name).availability()
        rows.append({"backend": name, "available": avail.available, "reason": avail.reason})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            state = "available" if row["available"] else f"not available: {row['reason']}"
            print(f"{row['backend']:<10} {state}")
    return 0
