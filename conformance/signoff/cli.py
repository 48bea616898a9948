"""``python -m conformance signoff``: merge the JUnit reports and print the verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.harness.expectations import DEFAULT_EXPECTATIONS_DIR
from conformance.signoff.engine import SignoffOptions, SignoffUsageError, run_signoff
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.evidence import save_evidence
from conformance.signoff.model import RELEASE_BACKENDS, Status

EPILOG = f"""\
Reads <reports>/junit/<backend>.xml and <backend>-shard-<i>-of-<n>.xml with their
*.meta.json sidecars, plus committed evidence (<evidence>/<YYYY-MM-DD>-<backend>/) for
backends without reports of their own. Writes <reports>/conformance.xml, signoff.md,
signoff.json and signoff.html.

Required backends: --release ({", ".join(RELEASE_BACKENDS)}) and/or --require; by default
the backends this machine can run (backends.registry), else those with reports.

Exit status: 0 PASS, 1 FAIL (a test failed), 3 INCOMPLETE (a required backend did not run,
a report is missing or unreadable, ids are missing or duplicated, or a skip is unexplained),
2 usage or I/O error.
"""


def _backend_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of backends")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``signoff`` subcommand."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "--reports",
        type=Path,
        default=Path("reports"),
        metavar="DIR",
        help="reports directory (default: reports); JUnit files are read from DIR/junit",
    )
    parser.add_argument(
        "--junit-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="read JUnit files from DIR instead of <reports>/junit",
    )
    parser.add_argument(
        "--require",
        type=_backend_list,
        default=None,
        metavar="LIST",
        help="comma-separated backends that must pass, e.g. cpu,cuda,rocm",
    )
    parser.add_argument(
        "--release",
        action="store_true",
        help=f"release sign-off: require {','.join(RELEASE_BACKENDS)} (plus any --require)",
    )
    parser.add_argument(
        "--evidence",
        type=Path,
        default=None,
        metavar="DIR",
        help="committed evidence directory (default: <reports>/evidence)",
    )
    parser.add_argument(
        "--no-evidence",
        action="store_true",
        help="ignore committed evidence",
    )
    parser.add_argument(
        "--collect",
        action="store_true",
        help="recompute each backend's expected ids with pytest --collect-only instead of "
        "trusting the sidecars",
    )
    parser.add_argument(
        "--expectations-dir",
        type=Path,
        default=DEFAULT_EXPECTATIONS_DIR,
        metavar="DIR",
        help="directory of <backend>.txt expectation files",
    )
    parser.add_argument(
        "--save-evidence",
        default=None,
        metavar="BACKEND",
        help="copy BACKEND's reports into <evidence>/<today>-BACKEND/ with versions.json, "
        "then exit (to commit GPU results)",
    )


def options_from(args: argparse.Namespace) -> SignoffOptions:
    """`SignoffOptions` from parsed arguments."""
    evidence = None if args.no_evidence else (args.evidence or args.reports / "evidence")
    return SignoffOptions(
        reports_dir=args.reports,
        junit_dir=args.junit_dir,
        require=args.require,
        release=args.release,
        evidence_dir=evidence,
        collect=args.collect,
        root=Path.cwd(),
        expectations_dir=args.expectations_dir,
    )


def main(args: argparse.Namespace) -> int:
    """Run the sign-off; print a summary; return the verdict's exit code."""
    options = options_from(args)
    if args.save_evidence:
        try:
            target = save_evidence(
                options.junit_path,
                args.save_evidence,
                options.evidence_dir or args.reports / "evidence",
            )
        except (SignoffInputError, OSError) as error:
            print(f"signoff: {error}", file=sys.stderr)
            return 2
        print(f"evidence saved in {target}; commit it to use it in a release sign-off")
        return 0
    try:
        result = run_signoff(options)
    except SignoffUsageError as error:
        print(f"signoff: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"signoff: cannot write the reports: {error}", file=sys.stderr)
        return 2
    print(f"MLA conformance sign-off: {result.verdict.value}")
    print(f"required: {', '.join(result.required) or 'none'} ({result.required_source})")
    for backend in result.backends.values():
        marker = " (required)" if backend.required else ""
        source = ""
        if backend.input.source == "evidence":
            source = f" [evidence {backend.input.evidence_date}]"
        print(
            f"  {backend.backend:<10} {backend.status.value:<10}{marker}{source}: {backend.reason}"
        )
    for line in result.blocking:
        print(f"  blocking: {line}")
    stale = sum(len(backend.stale_expectations) for backend in result.backends.values())
    if stale:
        print(f"  warning: {stale} stale expectation entries (see signoff.md)")
    for name, path in result.outputs.items():
        print(f"  {name}: {path}")
    not_run = [b for b in result.backends.values() if b.status == Status.NOT_RUN]
    if not_run and result.verdict.exit_code == 0:
        print("  not signed off here: " + ", ".join(b.backend for b in not_run))
    return result.verdict.exit_code


def run(argv: list[str] | None = None) -> int:
    """Standalone entry point (``python -m conformance.signoff``)."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance signoff",
        description="Merge the JUnit reports of every backend into a conformance verdict.",
    )
    add_arguments(parser)
    return main(parser.parse_args(argv))
