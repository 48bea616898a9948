"""``python -m conformance audit``: the static audits from the command line.

Also runnable on its own: ``python -m conformance.audit.cli PATH [PATH...]``. Exit status:
0 clean (warnings allowed), 1 findings, 2 usage error, bad protocol file or a file that does
not parse (the rest of the tree is still audited and its findings printed). See
docs/audit.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from conformance.audit import AUDITS, run_audit
from conformance.audit.protocol import ProtocolFileError
from conformance.audit.tree import AuditPathError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the audit's arguments to `parser` (used by ``python -m conformance audit``)."""
    parser.add_argument(
        "paths",
        metavar="PATH",
        nargs="+",
        help="source trees or .py files to audit; findings name files as PATH/relative/path",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--protocol",
        metavar="FILE",
        help="layer protocol file (one dotted attribute per line, optional [backend] "
        "sections); default: the registered backends' layer protocols",
    )
    parser.add_argument(
        "--only",
        choices=AUDITS,
        help="run one audit: construction (CommonAttentionMetadata sites) or stubs",
    )
    parser.add_argument(
        "--exclude",
        metavar="GLOB",
        action="append",
        default=[],
        help="skip files and folders whose relative path or name matches (repeatable)",
    )


def main(args: argparse.Namespace) -> int:
    """Run the audit `args` describe; print the report; return the exit status."""
    only = getattr(args, "only", None)
    audits = (only,) if only else AUDITS
    try:
        report = run_audit(
            args.paths,
            audits=audits,
            protocol_file=getattr(args, "protocol", None),
            exclude=getattr(args, "exclude", None) or (),
        )
    except (AuditPathError, ProtocolFileError) as exc:
        print(f"audit: error: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "json", False):
        print(report.to_json())
    else:
        text = report.to_text()
        if text:
            print(text)
        note = report.context.get("protocol", {}).get("note")
        if note:
            print(f"audit: note: layer protocol fallback ({note})", file=sys.stderr)
        print(report.summary(), file=sys.stderr)
    return report.exit_code


def build_parser() -> argparse.ArgumentParser:
    """The stand-alone parser of ``python -m conformance.audit.cli``."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance audit",
        description="Static audit of a source tree: CommonAttentionMetadata construction "
        "sites and layer stubs.",
    )
    add_arguments(parser)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run; argparse usage errors exit 2."""
    return main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(run())
