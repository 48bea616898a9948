"""``python -m conformance.goldens generate [--check] [--only ID ...] [--dir DIR]``.

``generate`` rebuilds the golden set serially and prints what changed (case ids added,
removed or changed, with the per-buffer differences); ``--check`` regenerates into a
temporary directory instead and exits 1 if anything differs from the committed set.
Exit status: 0 ok, 1 differences or a refused golden, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from conformance.goldens.store import GOLDENS_ENV


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.goldens",
        description="Generate or check the persistent-decode golden files.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser(
        "generate",
        help="regenerate the goldens (serially) and print what changed",
        description="Regenerate the goldens serially; print added/removed/changed cases.",
    )
    gen.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary directory and fail if anything differs",
    )
    gen.add_argument(
        "--only",
        nargs="+",
        metavar="ID",
        help="only these case ids (the other entries are kept as they are)",
    )
    gen.add_argument(
        "--dir",
        default=None,
        help=f"golden directory (default: ${GOLDENS_ENV} or tests/goldens)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    from conformance.goldens.generate import generate

    args = build_parser().parse_args(argv)
    return generate(args.dir, only=args.only, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
