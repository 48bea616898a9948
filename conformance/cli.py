"""Command line: ``python -m conformance {audit,signoff,backends} ...``.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``main(args) -> int``; this module only dispatches.
"""

from __future__ import annotations

import argparse
import importlib

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "audit": ("conformance.audit.cli", "static audit of a source tree (CAM sites, layer stubs)"),
    "signoff": ("conformance.signoff.cli", "merge JUnit reports into a release verdict"),
    "backends": ("conformance.backends_cli", "list backends and whether they can run here"),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per subcommand."""
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(sub)
        sub.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` and run the chosen subcommand; returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(importlib.import_module(args._module).main(args))
