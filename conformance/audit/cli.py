"""``python -m conformance audit``: the static audits from the command line.

Also runnable on its own: ``python -m conformance.audit.cli PATH [PATH...]``. Exit status:
0 clean (findings below ``--fail-on`` allowed), 1 findings, 2 usage error, bad
configuration, protocol, definition or baseline file, or a named problem in the tree (the
rest is still audited and reported). See docs/audit.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.audit.baseline import BaselineError, write_baseline
from conformance.audit.config import Config, ConfigError, find_pyproject, load_config, merge
from conformance.audit.engine import AUDITS, run_audit
from conformance.audit.findings import SEVERITIES
from conformance.audit.loader import Options, default_cache_dir
from conformance.audit.protocol import ProtocolFileError
from conformance.audit.sites import ENGINE_SITES, VLLM, EngineSites, sites_for, sites_of
from conformance.audit.tree import AuditPathError
from conformance.engines.facts import EngineFacts, FactsError, check_version, read_facts
from conformance.engines.releases import choose_facts
from conformance.engines.tree import TreeVersion, find_root, tree_version


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the audit's arguments to `parser` (used by ``python -m conformance audit``)."""
    add = parser.add_argument

    def repeatable(flag: str, metavar: str, text: str) -> None:
        """A flag that may be given again, its values collected in a list."""
        add(flag, metavar=metavar, action="append", default=[], help=text)

    add("paths", metavar="PATH", nargs="+", help="source trees or .py files to audit")
    add("--format", choices=("text", "json", "sarif"), default="text", help="output format")
    add("--json", action="store_true", help="the same as --format json")
    add("--only", choices=AUDITS, help="run one audit")
    add("--select", metavar="CODES", help="comma-separated rule codes or prefixes to report")
    add("--ignore", metavar="CODES", help="comma-separated rule codes or prefixes to drop")
    repeatable("--per-file-ignores", "GLOB:CODES", "drop CODES in files matching GLOB (repeatable)")
    levels = ", ".join(SEVERITIES)
    repeatable("--severity", "CODE=LEVEL", f"set a rule's severity ({levels}; repeatable)")
    add("--fail-on", choices=SEVERITIES, help="least severe level that exits 1 (default error)")
    repeatable("--exclude", "GLOB", "skip matching files and folders (repeatable)")
    add(
        "--config",
        metavar="FILE",
        help="pyproject.toml to read [tool.mla-conformance.audit] from "
        "(default: the nearest one above the first PATH)",
    )
    add("--no-config", action="store_true", help="read no pyproject.toml")
    add("--baseline", metavar="FILE", help="report only findings this baseline does not list")
    add(
        "--write-baseline",
        metavar="FILE",
        help="write every finding to FILE as the baseline; exit 0 unless problems",
    )
    add(
        "--protocol",
        metavar="FILE",
        help="judge every layer stub against this protocol file instead of the tree's builders",
    )
    add(
        "--definition",
        metavar="FILE",
        help="a .py file holding the record dataclass (vLLM: CommonAttentionMetadata), for "
        "trees without one",
    )
    add(
        "--facts",
        metavar="FILE",
        help="judge stubs and construction sites by the facts an engine target measured "
        "(the facts' engine and version must be the tree's); a folder (reports/engines): its "
        "facts of the tree's release, or a note that it has none",
    )
    add(
        "--engine",
        choices=tuple(ENGINE_SITES),
        help="the engine whose record, builders and layers the tree holds (default: the "
        "engine of --facts FILE, else the one whose package the first PATH holds, else vllm)",
    )
    add(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="worker processes (default: one per core, at most 8)",
    )
    add("--cache-dir", metavar="DIR", help=f"facts cache folder (default {default_cache_dir()})")
    add("--no-cache", action="store_true", help="neither read nor write the cache")
    add(
        "--max-file-size",
        type=int,
        metavar="BYTES",
        help="skip (as a problem) files larger than this",
    )


def _config(args: argparse.Namespace) -> Config:
    config = Config()
    if not getattr(args, "no_config", False):
        path = getattr(args, "config", None) or find_pyproject(args.paths)
        if path:
            config = load_config(path)
    table: dict[str, object] = {}
    for key in ("select", "ignore", "fail_on", "max_file_size"):
        value = getattr(args, key, None)
        if value is not None:
            table[key.replace("_", "-")] = value
    if getattr(args, "exclude", None):
        table["exclude"] = list(args.exclude)
    ignores: dict[str, list[str]] = {}
    for item in getattr(args, "per_file_ignores", None) or []:
        glob, _, codes = item.rpartition(":")
        if not glob:
            raise ConfigError(f"--per-file-ignores {item!r}: expected GLOB:CODES")
        ignores.setdefault(glob, []).extend(c for c in codes.split(",") if c)
    if ignores:
        table["per-file-ignores"] = ignores
    levels = {}
    for item in getattr(args, "severity", None) or []:
        code, _, level = item.partition("=")
        levels[code.strip()] = level.strip()
    if levels:
        table["severity"] = levels
    return merge(config, table, "command line")


def _detected(args: argparse.Namespace) -> EngineSites | None:
    """The engine whose package the first PATH's tree holds (`tree.find_root`), if any."""
    for sites in ENGINE_SITES.values() if args.paths else ():
        if find_root(args.paths[0], sites.engine) is not None:
            return sites
    return None


def _tree_engine(args: argparse.Namespace) -> EngineSites:
    """``--engine``, else the engine whose package the first PATH's tree holds, else vLLM."""
    named = getattr(args, "engine", None)
    return sites_of(named) if named else (_detected(args) or VLLM)


def _facts(args: argparse.Namespace) -> tuple[EngineFacts | None, EngineSites]:
    """The ``--facts`` file (or, for a folder, its file of the tree's release), read, checked
    and matched to the tree's engine and version; and the engine the tree is judged as."""
    path = getattr(args, "facts", None)
    if path and not os.path.isdir(path):
        facts = read_facts(path)
        sites = sites_for(facts, path)
        named = getattr(args, "engine", None)
        if named and named != sites.engine:
            raise FactsError(f"{path}: facts of engine {facts.engine!r}, --engine is {named!r}")
        detected = None if named else _detected(args)
        if detected is not None and detected is not sites:
            raise FactsError(
                f"{path}: facts of engine {facts.engine!r}, the tree is {detected.engine!r}'s"
            )
    else:
        facts, sites = None, _tree_engine(args)
    if not path:
        return None, sites
    engine = sites.engine
    tree = tree_version(args.paths[0], engine) if args.paths else TreeVersion(None, None)
    where = f"read from {tree.source}" if tree.source else ""
    if facts is None:
        choice = choose_facts(Path(path), engine, tree.version, where)
        if choice.path is None:
            print(f"audit: note: {choice.note}", file=sys.stderr)
            return None, sites
        path = os.fspath(choice.path)
        print(f"audit: judging {engine} {tree.version} ({where}) by {path}", file=sys.stderr)
        facts = read_facts(path)
    if tree.version is None:
        print(
            f"audit: note: the tree's {engine} version is unknown (no {engine}/_version.py, "
            f"version.py, PKG-INFO, dist-info or pyproject.toml version); judging it by {path}, "
            f"measured on {facts.engine} {facts.version}",
            file=sys.stderr,
        )
    check_version(facts, engine=engine, version=tree.version, source=path)
    return facts, sites


def main(args: argparse.Namespace) -> int:
    """Run the audit `args` describe; print the report; return the exit status."""
    only = getattr(args, "only", None)
    fmt = "json" if getattr(args, "json", False) else getattr(args, "format", "text")
    cache = (
        None
        if getattr(args, "no_cache", False)
        else (getattr(args, "cache_dir", None) or default_cache_dir())
    )
    writing = getattr(args, "write_baseline", None)
    try:
        facts, sites = _facts(args)
        config = _config(args)
        report = run_audit(
            args.paths,
            audits=(only,) if only else AUDITS,
            protocol_file=getattr(args, "protocol", None),
            definition_file=getattr(args, "definition", None),
            config=config,
            baseline=None if writing else getattr(args, "baseline", None),
            options=Options(jobs=getattr(args, "jobs", 0) or 0, cache_dir=cache),
            facts=facts,
            sites=sites,
        )
    except (AuditPathError, ProtocolFileError, ConfigError, BaselineError, FactsError) as exc:
        print(f"audit: error: {exc}", file=sys.stderr)
        return 2
    if writing:
        count = write_baseline(writing, report.findings)
        print(report.to_text() if fmt == "text" else "", end="")
        print(
            f"audit: wrote {count} finding(s) to the baseline {os.fspath(writing)}", file=sys.stderr
        )
        return 2 if report.problems else 0
    if fmt == "json":
        print(report.to_json())
    elif fmt == "sarif":
        print(report.to_sarif())
    else:
        text = report.to_text()
        if text:
            print(text)
    print(report.summary(), file=sys.stderr)
    return report.exit_code


def build_parser() -> argparse.ArgumentParser:
    """The stand-alone parser of ``python -m conformance.audit.cli``."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance audit",
        description="Static audit of a source tree: construction sites of an engine's record "
        "(vLLM's CommonAttentionMetadata, SGLang's ForwardBatch) and stubs of its layers and "
        "model runner.",
    )
    add_arguments(parser)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run; argparse usage errors exit 2."""
    return main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(run())
