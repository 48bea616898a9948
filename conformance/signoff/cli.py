"""``python -m conformance signoff``: merge the JUnit reports and print the verdict."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from conformance.runs.expectations import DEFAULT_EXPECTATIONS_DIR
from conformance.signoff.engine import (
    SignoffOptions,
    SignoffUsageError,
    remove_outputs,
    run_signoff,
)
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.evidence import save_evidence
from conformance.signoff.machine import known_backends
from conformance.signoff.model import RELEASE_BACKENDS, SignoffResult, Status
from conformance.signoff.paths import relative_text

EPILOG = f"""\
Reads <reports>/junit/<backend>.xml and <backend>-shard-<i>-of-<n>.xml with their
*.meta.json sidecars, plus committed evidence (<evidence>/<YYYY-MM-DD>-<backend>/) for
backends without reports of their own (or whose own reports skipped every test).
Writes <reports>/conformance.xml, signoff.md, signoff.json and signoff.html.

Required backends: --release ({", ".join(RELEASE_BACKENDS)}) and/or --require; by default
the suite's own backends this machine can run (backends.registry), else those with reports.
A plug-in backend is required only when --require names it; its reports are judged when it
is installed here, and shown as not judged when it is not.

A release sign-off recomputes each backend's test ids by collection (--no-collect trusts
the sidecars). Evidence whose files changed since it was made is STALE.

Exit status: 0 PASS, 1 FAIL (a test failed), 3 INCOMPLETE (a required backend did not run
or is STALE, a report is missing, unreadable or contradicts itself, ids are missing or
duplicated, or a skip or xfail is unexplained), 2 usage or I/O error (the sign-off outputs
are then removed, never left from an earlier run).
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
        "--no-collect",
        action="store_true",
        help="with --release: trust the sidecars' collected ids instead of collecting",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="FILE",
        help="an earlier signoff.json: list tests newly failing, newly passing, added, removed",
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
        help="copy BACKEND's reports into <evidence>/<today>-BACKEND/ with versions.json and "
        "the fingerprint of its files, then exit (to commit GPU results); refuses a run in "
        "which no test passed, made on the wrong kind of device, or whose claims disagree",
    )


_SAME_NAMED = tuple(
    "junit_dir require release collect no_collect baseline expectations_dir".split()
)
"""The `SignoffOptions` fields that take the parsed argument of the same name."""


def options_from(args: argparse.Namespace) -> SignoffOptions:
    """`SignoffOptions` from parsed arguments."""
    evidence = None if args.no_evidence else (args.evidence or args.reports / "evidence")
    same = {name: getattr(args, name) for name in _SAME_NAMED}
    return SignoffOptions(reports_dir=args.reports, evidence_dir=evidence, root=Path.cwd(), **same)


def _say(text: str, *, error: bool = False) -> None:
    """Print, surviving a reader that went away (``| head -1``)."""
    try:
        print(text, file=sys.stderr if error else sys.stdout, flush=True)
    except BrokenPipeError:
        # nobody reads on: send the rest (and the interpreter's final flush) nowhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (sys.stderr if error else sys.stdout).fileno())


def _save(args: argparse.Namespace, options: SignoffOptions) -> int:
    backends = options.backends
    try:
        target = save_evidence(
            options.junit_path,
            args.save_evidence,
            options.evidence_dir or args.reports / "evidence",
            root=options.root,
            expected_kind=backends.device_kind(args.save_evidence),
            known_backends=known_backends(backends, options.expectations_dir),
        )
    except (SignoffInputError, OSError) as error:
        _say(f"signoff: {relative_text(str(error), options.root)}", error=True)
        return 2
    _say(f"evidence saved in {relative_text(str(target), options.root)}; commit it")
    return 0


def _summary(result: SignoffResult) -> list[str]:
    lines = [
        f"MLA conformance sign-off: {result.verdict.value}",
        f"required: {', '.join(result.required) or 'none'} ({result.required_source})",
    ]
    lines += [f"  blocking: {line}" for line in result.blocking]
    for backend in result.backends.values():
        marker = " (required)" if backend.required else ""
        source = ""
        if backend.input.source == "evidence":
            source = f" [evidence {backend.input.evidence_date}]"
        lines.append(
            f"  {backend.backend:<10} {backend.status.value:<10}{marker}{source}: {backend.reason}"
        )
    stale = sum(len(backend.stale_expectations) for backend in result.backends.values())
    if stale:
        lines.append(f"  warning: {stale} stale expectation entries (see signoff.md)")
    lines += [f"  {name}: {path}" for name, path in result.outputs.items()]
    not_signed = [b.backend for b in result.backends.values() if b.status != Status.PASS]
    if not_signed:
        lines.append("  not signed off here: " + ", ".join(not_signed))
    return [relative_text(line, result.root) for line in lines]


NEEDED_PACKAGES: tuple[str, ...] = ("defusedxml",)
"""Packages the sign-off needs to read reports (``--help`` needs none of them)."""


def missing_packages() -> list[str]:
    """The `NEEDED_PACKAGES` this interpreter cannot import."""
    return [name for name in NEEDED_PACKAGES if importlib.util.find_spec(name) is None]


def main(args: argparse.Namespace) -> int:
    """Run the sign-off; print a summary; return the verdict's exit code."""
    missing = missing_packages()
    if missing:
        _say(
            f"signoff: needs the Python package {missing[0]!r} to read reports safely, which is "
            "not installed here (pip install -r requirements/base.txt, or run it through nox: "
            "nox -s signoff)",
            error=True,
        )
        return 2
    if not args.reports.is_dir():
        _say(f"signoff: --reports {args.reports}: no such directory", error=True)
        return 2
    if args.baseline is not None and not args.baseline.is_file():
        _say(f"signoff: --baseline {args.baseline}: no such file", error=True)
        return 2
    options = options_from(args)
    if args.save_evidence:
        return _save(args, options)
    try:
        result = run_signoff(options)
    except (SignoffUsageError, SignoffInputError, OSError) as error:
        remove_outputs(options.reports_dir)
        _say(f"signoff: {relative_text(str(error), options.root)}", error=True)
        return 2
    except BaseException:
        remove_outputs(options.reports_dir)  # a crash leaves no earlier verdict standing
        raise
    for line in _summary(result):
        _say(line)
    return result.verdict.exit_code


def run(argv: list[str] | None = None) -> int:
    """Standalone entry point (``python -m conformance.signoff``)."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance signoff",
        description="Merge the JUnit reports of every backend into a conformance verdict.",
    )
    add_arguments(parser)
    return main(parser.parse_args(argv))
