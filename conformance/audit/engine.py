"""One audit run: walk, load (parallel, cached), resolve, check, filter, baseline."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from conformance.audit.baseline import split_known
from conformance.audit.config import Config
from conformance.audit.construction import Definitions, audit_sites, consumers, definition_findings
from conformance.audit.definition import CamDefinition
from conformance.audit.findings import Finding, Problem
from conformance.audit.index import Index
from conformance.audit.loader import DEFAULT_MAX_FILE_SIZE, Options, load_many, load_one
from conformance.audit.measured import Measured
from conformance.audit.protocol import LayerProtocol, ProtocolFileError, load_protocol_file
from conformance.audit.report import AuditReport
from conformance.audit.runner_stubs import RunnerStubJudge
from conformance.audit.sites import VLLM, EngineSites, sites_for
from conformance.audit.stubs import StubJudge
from conformance.audit.tree import walk
from conformance.engines.facts import EngineFacts, FactsError

AUDITS: tuple[str, ...] = ("construction", "stubs")
_EMPTY: dict[str, Any] = {"imports": {}, "stars": [], "aliases": {}, "classes": {}}


class DefinitionFileError(ProtocolFileError):
    """A ``--definition`` file without a readable dataclass of the engine's record."""


def load_definition_file(path: str, sites: EngineSites = VLLM) -> CamDefinition:
    """The record dataclass (``CommonAttentionMetadata`` for vLLM) of the file at `path`."""
    _, facts = load_one((path, path, True, DEFAULT_MAX_FILE_SIZE, None, sites.engine))
    if isinstance(facts, Problem):
        raise DefinitionFileError(path, facts.line, f"{facts.name}: {facts.message}")
    if not isinstance(facts, dict) or not facts["cam_defs"]:
        raise DefinitionFileError(path, 0, f"defines no {sites.record} dataclass")
    raw = facts["cam_defs"][0]
    return CamDefinition.from_facts(raw, f"{path}:{raw['line']}")


def build_index(
    paths: Sequence[str | os.PathLike[str]],
    config: Config,
    options: Options,
    sites: EngineSites = VLLM,
) -> tuple[Index, list[Problem]]:
    """Walk `paths` and load every file's facts, as `sites` defines them (the first pass)."""
    found = walk(paths, config.exclude)
    cap = config.max_file_size or options.max_file_size
    jobs = [
        (
            e.path,
            e.display,
            e.relpath.endswith("__init__.py") or e.path == e.root,
            cap,
            options.cache_dir,
            sites.engine,
        )
        for e in found.files
    ]
    problems = list(found.problems)
    facts: list[Any] = []
    for _, value in load_many(jobs, options.jobs):
        if isinstance(value, Problem):
            problems.append(value)
            facts.append(dict(_EMPTY))
        else:
            facts.append(value)
    return Index(found.files, facts, cap, options.cache_dir, sites), problems


def _noqa(index: Index, by_path: dict[str, int], finding: Finding) -> bool:
    number = by_path.get(finding.file)
    if number is None:
        return False
    table = index.facts(number).get("noqa", {})
    first, last = finding.span if finding.span[0] else (finding.line, finding.line)
    codes = {c for line in range(first, last + 1) for c in table.get(str(line), [])}
    return "*" in codes or finding.code in codes


def run_audit(
    paths: Sequence[str | os.PathLike[str]],
    *,
    audits: Sequence[str] = AUDITS,
    protocol: LayerProtocol | None = None,
    protocol_file: str | os.PathLike[str] | None = None,
    definition_file: str | None = None,
    exclude: Sequence[str] = (),
    config: Config | None = None,
    baseline: str | None = None,
    options: Options | None = None,
    facts: EngineFacts | None = None,
    sites: EngineSites | None = None,
) -> AuditReport:
    """Run `audits` over `paths` and collect one report (docs/audit.md).

    The tree is an engine's: `sites` (default: the engine of `facts`, else vLLM) names its
    record, builders and layers. Files are read as the registered sites of that engine
    (`ENGINE_SITES[sites.engine]`, by name, in worker processes and in the cache); `sites`
    itself judges them. With `facts` (that engine's measured facts), stubs and construction
    sites are judged by what the real builders were seen to need (`measured`).

    Raises `tree.AuditPathError` for a PATH that cannot be audited, `ProtocolFileError` for
    a bad protocol or definition file, `baseline.BaselineError` for a bad baseline and
    `FactsError` for facts of an engine the audit does not know or that is not `sites`';
    named problems of the tree are reported, not raised.
    """
    unknown = sorted(set(audits) - set(AUDITS))
    if unknown:
        raise ValueError(f"audits: expected some of {list(AUDITS)}, found {unknown}")
    config = config or Config()
    if exclude:
        config = Config(**{**config.__dict__, "exclude": (*config.exclude, *exclude)})
    options = options or Options()
    if protocol is None and protocol_file:
        protocol = load_protocol_file(protocol_file)
    if sites is None:
        sites = sites_for(facts) if facts is not None else VLLM
    elif facts is not None and sites_for(facts).engine != sites.engine:
        raise FactsError(f"facts of engine {facts.engine!r}, the tree is {sites.engine!r}")
    override = load_definition_file(definition_file, sites) if definition_file else None
    index, problems = build_index(paths, config, options, sites)
    measured = Measured(facts, index) if facts is not None else None
    if facts is not None:
        members = tuple(sorted({b.cls for b in facts.builders.values() if b.cls}))
        index.registries = {registry: members for registry in sites.registries}
    raw: list[Finding] = []
    context: dict[str, Any] = {}
    if "construction" in audits:
        defs = Definitions(index, override)
        raw += definition_findings(index, defs, os.fspath(paths[0]) if paths else ".")
        if defs.primary is not None:
            raw += audit_sites(index, defs, measured)
            context["definition"] = {
                "source": defs.primary.source,
                "fields": list(defs.primary.fields),
                "required": sorted(defs.primary.required),
                "deprecated": sorted(defs.primary.deprecated),
            }
        context["consumers"] = consumers(index)
    if "stubs" in audits:
        judge = StubJudge(index, protocol, measured)
        raw += judge.run()
        context["stubs"] = {
            "protocol": protocol.to_json() if protocol else None,
            "judged": judge.judged,
            "reaching_no_builder": judge.unreached,
        }
        if sites.runner:
            runners = RunnerStubJudge(index, measured)
            raw += runners.run()
            context["stubs"]["runner_stubs_judged"] = runners.judged
    problems += index.late_problems
    kept: list[Finding] = []
    suppressed = 0
    by_path = {e.path: n for n, e in enumerate(index.entries)}
    for finding in raw:
        if _noqa(index, by_path, finding):
            suppressed += 1
            continue
        configured = config.apply(finding)
        if configured is not None:
            kept.append(configured)
    known: list[Finding] = []
    baseline = baseline or config.baseline
    if baseline:
        kept, known = split_known(kept, baseline)
    context["config"] = {"source": config.source, "baseline": baseline}
    if facts is not None:
        context["facts"] = {
            "engine": facts.engine,
            "version": facts.version,
            "builders": sorted(facts.builders),
        }
    return AuditReport(
        findings=kept,
        problems=problems,
        files_audited=len(index.entries),
        audits=tuple(a for a in AUDITS if a in audits),
        fail_on=config.fail_on,
        known=len(known),
        suppressed=suppressed,
        context=context,
        sites=sites,
    )
