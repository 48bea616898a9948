"""Construction-site audit: every construction of the engine's record (vLLM's
``CommonAttentionMetadata(...)``, SGLang's ``ForwardBatch(...)``; `sites.EngineSites`).

A site is a call whose callee resolves (imports followed) to the tree's record dataclass,
or to that name outside the tree; a site whose callee resolves to another class of the tree
is not one. It is checked against the definition it resolves to (else the tree's first),
and against the record's *consumers*: functions and builder methods taking the record (a
parameter annotated with the record class or named as the engine names it,
``common_attn_metadata``, ``forward_batch``) and dereferencing or asserting a field
(`usage.consumer_needs`), also through the helpers they hand it to (`handoffs`). A field
with a default is needed only when a consumer the site reaches (`reach`) needs it; for a
run-time choice among a registry's builders, when any candidate the site can pick needs it
(`choice`); for a decode-only site, not when it is read on the prefill path only. A
transformation of the record (`transforms`) is judged against the consumers its result
reaches (`receivers`). A site that reaches no consumer is checked for the required fields
only (nothing is guessed). Where the engine fills its record after building it (SGLang),
fields assigned on the local the construction is bound to count as passed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from conformance.audit.choice import RunTimeChoice, choose
from conformance.audit.definition import CamDefinition
from conformance.audit.findings import Finding, join_names
from conformance.audit.index import Index, Target
from conformance.audit.measured import Measured, site_kinds
from conformance.audit.reach import ScopeGraph, definer, reached_from
from conformance.audit.receivers import transformation_receivers
from conformance.audit.sites import VLLM, EngineSites
from conformance.audit.transforms import callers, transformation
from conformance.audit.usage import PREFILL_ONLY


@dataclass(frozen=True)
class ConstructionSite:
    """One construction of the record, bound to its definition."""

    path: str
    relpath: str
    line: int
    col: int
    end_line: int
    qualname: str
    passed: tuple[str, ...]
    passed_none: tuple[str, ...]
    unpacked: bool
    unknown: tuple[str, ...]
    extra_positional: int
    ignored: frozenset[str] = frozenset()
    """Codes ``# noqa`` comments on the call silence (``"*"`` for all)."""


def _bind(site: dict[str, Any], definition: CamDefinition) -> dict[str, Any]:
    positional = definition.positional[: site["npos"]]
    passed = [*positional, *site["kw"], *site.get("later", ())]
    none = [definition.positional[i] for i in site["pos_none"] if i < len(definition.positional)]
    known = set(definition.fields) | set(definition.deprecated)
    return {
        "passed": tuple(passed),
        "passed_none": tuple(none + site["kw_none"]),
        "unpacked": site["unpacked"],
        "unknown": tuple(n for n in site["kw"] if n not in known),
        "extra_positional": max(0, site["npos"] - len(definition.positional)),
    }


class Definitions:
    """The tree's record dataclasses, by the class they are on."""

    def __init__(self, index: Index, override: CamDefinition | None = None) -> None:
        self.index = index
        self.record = index.sites.record
        self.found: list[tuple[int, Target, CamDefinition]] = []
        for number, facts in index.loaded():
            module = index.names_of[number][0] if index.names_of[number] else ""
            for raw in facts["cam_defs"]:
                source = f"{index.entries[number].display}:{raw['line']}"
                target = Target("class", module, self.record)
                self.found.append((number, target, CamDefinition.from_facts(raw, source)))
        core = [f for f in self.found if not index.entries[f[0]].is_support]
        self.primary = override or ((core or self.found)[0][2] if self.found else None)

    def for_callee(self, module: str, callee: str) -> CamDefinition | bool | None:
        """The definition a callee resolves to; False when it is not a site at all."""
        target = self.index.resolve_dotted(module, callee)
        if target is None:
            return self.primary if callee.rsplit(".", 1)[-1] == self.record else False
        if target.kind == "external":
            return self.primary if target.module.endswith(self.record) else False
        if target.kind != "class" or target.name.rsplit(".", 1)[-1] != self.record:
            return False
        number = self.index.modules.get(target.module)
        for found_number, _, definition in self.found:
            if found_number == number:
                return definition
        return self.primary


def consumers(index: Index) -> dict[str, list[str]]:
    """Every consumer of the tree (``Class`` or ``function``) → the fields it needs."""
    table: dict[str, list[str]] = {}
    entry = index.sites.consumer_method
    for number, facts in index.loaded():
        for module in index.names_of[number][:1]:
            for name, info in facts["classes"].items():
                if entry and not index.consumes(Target("class", module, name), "cam"):
                    continue
                if info["cam"]:  # inherited needs are their base's, listed under the base
                    table[f"{module}.{name}"] = sorted(
                        {_field(f) for v in info["cam"].values() for f in v}
                    )
            for name, info in facts["functions"].items():
                table[f"{module}.{name}"] = sorted({_field(f) for f in info["cam"]})
    return table


def iter_sites(
    index: Index, defs: Definitions
) -> Iterator[tuple[int, dict, CamDefinition, ConstructionSite]]:
    """Every construction site with the definition it is bound to."""
    for number, facts in index.loaded():
        module = (index.names_of[number] or [""])[0]
        entry = index.entries[number]
        for raw in facts["sites"]:
            definition = defs.for_callee(module, raw["callee"])
            if definition is False or definition is None:
                continue
            ignored = frozenset(
                c
                for line in range(raw["line"], raw["end"] + 1)
                for c in facts["noqa"].get(str(line), [])
            )
            site = ConstructionSite(
                entry.display,
                entry.relpath,
                raw["line"],
                raw["col"],
                raw["end"],
                raw["q"],
                ignored=ignored,
                **_bind(raw, definition),  # type: ignore[arg-type]
            )
            yield number, raw, definition, site


def audit_sites(index: Index, defs: Definitions, measured: Measured | None = None) -> list[Finding]:
    """The findings of every construction site (noqa is applied by the caller)."""
    findings: list[Finding] = []
    for number, raw, definition, site in iter_sites(index, defs):
        facts = index.facts(number)
        module = (index.names_of[number] or [""])[0]
        method = transformation(site.qualname, index.sites)
        seen = measured.dropped(method) if measured and method and callers(index, method) else None
        if seen is not None:  # what the facts saw it drop, that its receivers need
            dropped, reasons = seen
            lost = {f for fields in dropped.values() for f in fields}
            site = replace(site, passed=tuple(p for p in site.passed if p not in lost))
            received, why = transformation_receivers(index, method, measured) or ({}, [])
            table = {c: [f for f in fields if f in lost] for c, fields in received.items()}
            reasons = [*reasons, *why]
        elif method:
            # a transformation nothing calls is checked for the required fields only
            table, reasons = transformation_receivers(index, method) or ({}, [])
        else:
            mode = raw.get("mode")
            table, reasons = site_needs(index, module, facts, site.qualname, measured, mode)
        findings += check_site(site, definition, table, index.entries[number], reasons, index.sites)
    return findings


def _entry(consumer: str, sites: EngineSites) -> bool:
    """``Builder.build``: named first in messages (the method the engine calls)."""
    return consumer.split(" (", 1)[0].endswith(f".{sites.builder_entry}")


def _field(need: str) -> str:
    return need.split(PREFILL_ONLY, 1)[0]


def decode_only(facts: dict[str, Any], qualname: str) -> bool:
    """Whether a site in `qualname` builds speculative-verification batches: its scope, its
    callees or its callers configure speculative decoding, so its batches are decodes."""
    scopes = set().union(*list(ScopeGraph(facts).rings(qualname))[:2])
    return bool(scopes & set(facts.get("speculative", ())))


def site_needs(
    index: Index,
    module: str,
    facts: dict[str, Any],
    qualname: str,
    measured: Measured | None = None,
    mode: str | None = None,
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Consumer method (``Class.method``) → the fields it needs, for the consumers a site in
    `qualname` reaches, and consumer → why it is reached. Fields read on the prefill path only are
    left out for a decode-only site (`decode_only`, or one passing a decode `mode` literally);
    measured needs count on the batch kinds the site builds (its `mode`'s, else any)."""
    kinds = index.sites.mode_of(mode)
    if kinds is None:
        decodes = decode_only(facts, qualname)
        kinds, because = site_kinds(decodes), "it sets up speculative decoding"
    else:
        decodes, because = kinds == ("decode",), f"it passes {index.sites.mode_field}={mode}"
    table, reasons = _site_table(index, module, facts, qualname, measured, kinds)
    for reason in reasons.values():
        if isinstance(reason, RunTimeChoice):
            reason.decodes = decodes
    if decodes and any(PREFILL_ONLY in f for fields in table.values() for f in fields):
        reasons["*"] = (
            f"its batches are decodes ({because}), so reads on the prefill path only are not "
            "required"
        )
    return {
        consumer: [_field(f) for f in fields if not (decodes and PREFILL_ONLY in f)]
        for consumer, fields in table.items()
    }, reasons


def _site_table(
    index: Index,
    module: str,
    facts: dict[str, Any],
    qualname: str,
    measured: Measured | None,
    kinds: tuple[str, ...],
) -> tuple[dict[str, list[str]], dict[str, str]]:
    table: dict[str, list[str]] = {}
    reasons: dict[str, str] = {}

    def note(reason: str) -> None:
        for consumer in table:
            reasons.setdefault(consumer, reason)

    reached = reached_from(index, module, facts, qualname, "cam")
    for one in reached:
        if one.runtime:
            continue
        if measured and measured.field_needs(one.target, kinds, table):
            note(one.how)
            continue
        for method, fields in index.by_method(one.target, "cam").items():
            if one.method is None or method == one.method:
                for field in fields:
                    owner = definer(index, one.target, method, "cam", _field(field))
                    table.setdefault(f"{owner.name}.{method}", []).append(field)
        note(one.how)
    runtime = [r for r in reached if r.runtime]
    if runtime:
        choose(index, module, facts, runtime, measured, kinds, table, reasons)
    return table, reasons


def check_site(
    site: ConstructionSite,
    definition: CamDefinition,
    table: dict[str, list[str]],
    entry: Any,
    reasons: Mapping[str, str] | list[str] | None = None,
    sites: EngineSites = VLLM,
) -> list[Finding]:
    """The findings of one site, given the consumers it reaches and what they need."""
    where = f"{sites.record}(...) in {site.qualname}"
    given = set(site.passed)
    by_field: dict[str, str] = {}
    ordered = sorted(table.items(), key=lambda kv: (not _entry(kv[0], sites), kv[0]))
    for consumer, fields in ordered:
        for name in fields:
            if name in definition.fields and name not in definition.required:
                by_field.setdefault(name, consumer)
    if isinstance(reasons, Mapping):  # the reasons of the consumers a finding names
        lacking = [n for n in definition.fields if n not in given or n in site.passed_none]
        named = {by_field[n] for n in lacking if n in by_field}
        missing = {n for n in lacking if n in by_field}
        reasons = list(
            dict.fromkeys(
                v.why(missing) if isinstance(v, RunTimeChoice) else v
                for k, v in reasons.items()
                if k in named or k == "*"
            )
        )
    reached = f"; reached: {'; '.join(reasons)}" if reasons else ""
    findings: list[Finding] = []

    def add(code: str, message: str, names: list[str]) -> None:
        findings.append(
            Finding(
                site.path,
                site.line,
                site.col,
                code,
                f"{where} {message}",
                tuple(names),
                site.qualname,
                file=entry.path,
                relpath=entry.relpath,
                span=(site.line, site.end_line),
            )
        )

    absent_required = [n for n in definition.fields if n in definition.required and n not in given]
    absent_needed = [n for n in definition.fields if n in by_field and n not in given]
    if site.unpacked and (absent_required or absent_needed):
        hidden = [*absent_required, *absent_needed]
        add(
            "CAM003",
            f"unpacks *args/**kwargs, so the audit cannot verify that it passes "
            f"{join_names(hidden)} (definition at {definition.source})",
            hidden,
        )
        absent_required, absent_needed = [], []
    parts = []
    if absent_required:
        parts.append(
            "leaves out " + join_names(f"{n} (required: no default)" for n in absent_required)
        )
    if absent_needed:
        parts.append(
            "leaves out " + join_names(f"{n} (read by {by_field[n]})" for n in absent_needed)
        )
    nones = [n for n in site.passed_none if n in by_field]
    if nones and not entry.is_support:
        parts.append("passes None for " + join_names(f"{n} (read by {by_field[n]})" for n in nones))
    if parts:
        add(
            "CAM001",
            " and ".join(parts)
            + f" (definition at {definition.source}{reached if absent_needed or nones else ''})",
            [*absent_required, *absent_needed, *(nones if not entry.is_support else [])],
        )
    if nones and entry.is_support:
        add(
            "CAM006",
            "passes None on purpose for "
            + join_names(f"{n} (read by {by_field[n]})" for n in nones)
            + (f" ({reached[2:]})" if reached else ""),
            nones,
        )
    deprecated = [n for n in dict.fromkeys(site.passed) if n in definition.deprecated]
    if deprecated:
        hints = "; ".join(f"{n}: {definition.deprecated[n]}" for n in deprecated)
        add("CAM002", f"passes deprecated {join_names(deprecated)} ({hints})", deprecated)
    if site.unknown:
        add(
            "CAM004",
            f"passes {join_names(site.unknown)}, not a field of the definition at "
            f"{definition.source}",
            list(site.unknown),
        )
    if site.extra_positional:
        add(
            "CAM004",
            f"passes {site.extra_positional} positional argument(s) beyond the "
            f"{len(definition.positional)} positional fields of the definition at "
            f"{definition.source}",
            [],
        )
    return findings


def definition_findings(index: Index, defs: Definitions, first_path: str) -> list[Finding]:
    """CAM005 for every definition but the one used; CAM007 once when there is none."""
    record = index.sites.record
    if defs.primary is None:
        if not any(facts["sites"] for _, facts in index.loaded()):
            return []
        return [
            Finding(
                first_path,
                0,
                0,
                "CAM007",
                f"the audited tree defines no {record} dataclass: construction sites are "
                "not checked (give --definition FILE, or a PATH holding the definition)",
                (record,),
            )
        ]
    findings = []
    for number, _, definition in defs.found:
        if definition is defs.primary:
            continue
        entry = index.entries[number]
        line = int(definition.source.rsplit(":", 1)[1])
        findings.append(
            Finding(
                entry.display,
                line,
                0,
                "CAM005",
                f"another {record} dataclass; sites that resolve to it are checked against "
                f"it, the others against {defs.primary.source}",
                (record,),
                file=entry.path,
                relpath=entry.relpath,
            )
        )
    return findings


class TreeParseError(ValueError):
    """A strict caller's tree holds named problems (unparsable or unreadable files)."""

    def __init__(self, problems: Any) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(p.to_text() for p in self.problems))
