"""Command line: ``python -m conformance {audit,signoff,backends} ...``.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``main(args) -> int``; this module only dispatches, importing the chosen one alone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "audit": ("conformance.audit.cli", "static audit of a source tree (CAM sites, layer stubs)"),
    "signoff": ("conformance.signoff.cli", "merge JUnit reports into a release verdict"),
    "backends": ("conformance.cli.backends", "list backends and whether they can run here"),
}


def _chosen(argv: list[str]) -> str | None:
    """The subcommand named in `argv` (its first word that is not an option)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _import(name: str) -> ModuleType:
    module, _ = SUBCOMMANDS[name]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        print(
            f"python -m conformance {name}: needs the Python package {exc.name!r}, which is "
            f"not installed here (install the suite's dependencies, or run it through nox)",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only `command`'s module is imported for its options."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance", description="The MLA Conformance Suite's command line."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        if name == command:
            _import(name).add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` and run the chosen subcommand; returns its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    command = _chosen(argv)
    if command not in SUBCOMMANDS:
        command = None
    args = build_parser(command).parse_args(argv)
    try:
        return int(_import(args.command).main(args))
    except BrokenPipeError:  # the reader went away (``| head -1``): nothing left to say
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Send the rest of the output, and the interpreter's final flush, nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
