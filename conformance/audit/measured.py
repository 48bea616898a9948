"""Measured facts in the audit (``--facts FILE``): judge by what the real builders were seen
to read and need, instead of by the static reasoning.

A tree class is mapped to the measured builders by its dotted path (``module.Class``): a
measured builder whose class is it, or has it among its bases (a family root such as
``MLACommonMetadataBuilder`` maps to every measured builder deriving from it). A class no
measured builder maps to (or only builders that did not run) is judged statically.

* A layer stub lacks only what a measured builder it reaches *required* (its absence made
  the builder fail): `BuilderFacts.required` for the group's first layer,
  `required_on_every_layer` for every layer; on SGLang, a layer handed to
  ``forward_decode``, the provenance's ``layer_required`` (one decode forward measured).
* A construction leaves out an optional field only when a measured builder it reaches
  needed that field on a batch kind the site can build (`FieldFacts.needed_by`; a
  decode-only site builds decodes only).
* A transformation drops what the facts saw it drop (`TransformFacts.dropped`), reported
  when a measured builder needs the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from conformance.audit.index import Index, Target
from conformance.engines.facts import BATCH_KINDS, BuilderFacts, EngineFacts

LAYER_REQUIRED = "layer_required"
"""The provenance key of an engine whose facts measure layers through one builder method:
builder → layer attribute → the error its absence raised (`conformance.engines.sglang.layer`)."""


def short(error: str, limit: int = 90) -> str:
    """One line of a measured error, cut to `limit` characters."""
    line = " ".join(error.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Measured:
    """The facts of one run, mapped onto one tree's classes."""

    def __init__(self, facts: EngineFacts, index: Index) -> None:
        self.facts = facts
        self.index = index

    def builders(self, target: Target, *, exact: bool = False) -> list[tuple[str, BuilderFacts]]:
        """Measured builders (name, facts) that are `target` or (unless `exact`) derive
        from it, and ran."""
        dotted = f"{target.module}.{target.name}"
        return [
            (name, b)
            for name, b in sorted(self.facts.builders.items())
            if (b.cls == dotted or (not exact and dotted in b.bases)) and b.status != "not-run"
        ]

    def layer_builders(
        self, target: Target, method: str | None = None
    ) -> list[tuple[str, BuilderFacts, Mapping[str, str]]]:
        """(name, facts, what a layer must carry) of the measured builders of `target` whose
        layers the facts measured: for an engine that measures them through one builder
        method (SGLang's ``forward_decode``: the provenance's ``layer_required``), only for a
        layer handed to that `method`; else (vLLM) the builders' own `required`."""
        through = self.index.sites.measured_layer_method
        if not through:
            return [(n, b, b.required) for n, b in self.builders(target)]
        if method != through:
            return []
        table = self.facts.provenance.get(LAYER_REQUIRED) or {}
        return [(n, b, table[n]) for n, b in self.builders(target) if n in table]

    def stub_needs(
        self, target: Target, first: bool, needs: dict[str, set[str]], method: str | None = None
    ) -> bool:
        """Add what the measured builders of `target` required of a layer (handed to
        `method`); False when none maps to it (judge it statically)."""
        found = self.layer_builders(target, method)
        for name, builder, required in found:
            for path in required if first else ():
                needs.setdefault(path, set()).add(f"{name} (measured)")
            for path in builder.required_on_every_layer:
                needs.setdefault(path, set()).add(f"{name} (measured, on every layer)")
        return bool(found)

    def example(self, target: Target, paths: Sequence[str], method: str | None = None) -> str:
        """One measured error for one of `paths`, for the message."""
        for name, _, required in self.layer_builders(target, method):
            for path in paths:
                if path in required:
                    return f"{name} without {path}: {short(required[path])}"
        return ""

    def field_needs(
        self,
        target: Target,
        kinds: Sequence[str],
        table: dict[str, list[str]],
        *,
        exact: bool = False,
    ) -> bool:
        """Add the optional fields the measured builders of `target` needed on batch
        `kinds`; False when none maps to it."""
        found = self.builders(target, exact=exact)
        for name, _ in found:
            label = f"{name} (measured on {'/'.join(kinds)} batches)"
            for field, field_facts in sorted(self.facts.fields.items()):
                if set(field_facts.needed_by.get(name, ())) & set(kinds):
                    table.setdefault(label, []).append(field)
        return bool(found)

    def dropped(self, method: str) -> tuple[dict[str, list[str]], list[str]] | None:
        """The measured drop of transformation `method`: who needs each dropped field."""
        transform = self.facts.transformations.get(method)
        if transform is None or not transform.ran:
            return None
        table: dict[str, list[str]] = {}
        for field in transform.dropped:
            for name in self.facts.builders_needing(field):
                table.setdefault(f"{name} (measured)", []).append(field)
        reason = f"{self.facts.engine} {self.facts.version}'s {method}() was seen to drop " + (
            ", ".join(transform.dropped) or "nothing"
        )
        return table, [reason]


def site_kinds(decode_only: bool) -> tuple[str, ...]:
    """The batch kinds a construction site can build."""
    return ("decode",) if decode_only else BATCH_KINDS
