"""The measured-facts file: what an engine target saw an engine's own code read and need.

An engine target (``nox -s vllm``) drives the engine's real metadata record and builders and
writes one facts file; ``python -m conformance audit TREE --facts FILE`` judges a tree of that
engine by it. The file is JSON, standard library only, and carries a sha256 of its own content,
so a hand-edited file is refused. Layout (``FORMAT``)::

    {"format": "mla-conformance/engine-facts/1", "engine": "vllm", "version": "0.33.0",
     "record": {"class": "vllm.v1.attention.backend.CommonAttentionMetadata",
                "fields": [...], "optional": [...]},
     "builders": {"TRITON_MLA": {"class": "...TritonMLAMetadataBuilder", "bases": [...],
                  "status": "built", "reason": "", "batch_kinds": ["decode", "mixed"],
                  "reads": {"init": [...], "build": [...]},
                  "required": {"q_lora_rank": "AttributeError: ..."},
                  "required_on_every_layer": [...]}},
     "fields": {"seq_lens_cpu_upper_bound": {"optional": true,
                "needed_by": {"TRITON_MLA": ["mixed"]}, "errors": {"TRITON_MLA/mixed": "..."}}},
     "transformations": {"unpadded": {"ran": true, "dropped": [], "reason": ""}},
     "provenance": {...}, "sha256": "<hex of the canonical JSON of everything else>"}

`reads` are the layer attributes a builder was seen to read (constructor and ``build()``);
`required` those whose absence on the first layer made it fail, with the error;
`required_on_every_layer` those whose absence on a later layer did. A field's `needed_by` names,
per builder, the batch kinds on which leaving the field unset made ``build()`` fail.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "mla-conformance/engine-facts/1"
BATCH_KINDS = ("decode", "mixed", "prefill")
BUILDER_STATUSES = ("built", "constructed", "not-run")
PHASES = ("init", "build")


class FactsError(ValueError):
    """A facts file that cannot be used; the message is one line naming the file and what."""


@dataclass(frozen=True)
class BuilderFacts:
    """What one real metadata builder was seen to read from its layers and to need."""

    cls: str
    bases: tuple[str, ...] = ()
    status: str = "built"
    reason: str = ""
    batch_kinds: tuple[str, ...] = ()
    reads: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    required: Mapping[str, str] = field(default_factory=dict)
    required_on_every_layer: tuple[str, ...] = ()

    def read_set(self) -> frozenset[str]:
        """Every layer attribute read, constructor and ``build()`` together."""
        return frozenset(name for names in self.reads.values() for name in names)


@dataclass(frozen=True)
class FieldFacts:
    """One field of the engine's record: optional or not, and who needs it on which batches."""

    optional: bool
    needed_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)


def optional_field_facts(
    names: Iterable[str], needs: Mapping[str, Mapping[str, str]]
) -> dict[str, FieldFacts]:
    """The facts of each optional field: ``needs[field]`` maps ``"builder/batch kind"`` to the
    error its absence raised there (a field nobody needs: no entry)."""
    facts = {}
    for name in names:
        errors = dict(needs.get(name, {}))
        by_builder: dict[str, list[str]] = {}
        for key in errors:
            builder, kind = key.split("/")
            by_builder.setdefault(builder, []).append(kind)
        facts[name] = FieldFacts(
            optional=True,
            needed_by={b: tuple(k) for b, k in sorted(by_builder.items())},
            errors=errors,
        )
    return facts


@dataclass(frozen=True)
class TransformFacts:
    """One transformation of the record and the fields it was seen to drop."""

    ran: bool
    dropped: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class EngineFacts:
    """The whole facts file."""

    engine: str
    version: str
    record_class: str
    record_fields: tuple[str, ...]
    optional_fields: tuple[str, ...]
    builders: Mapping[str, BuilderFacts]
    fields: Mapping[str, FieldFacts]
    transformations: Mapping[str, TransformFacts]
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def builders_needing(self, name: str) -> dict[str, tuple[str, ...]]:
        """Builder → batch kinds on which record field `name` was needed (empty: none)."""
        facts = self.fields.get(name)
        return {} if facts is None else dict(facts.needed_by)

    def to_json(self) -> dict[str, Any]:
        """The file's content, checksum included."""
        body = {
            "format": FORMAT,
            "engine": self.engine,
            "version": self.version,
            "record": {
                "class": self.record_class,
                "fields": list(self.record_fields),
                "optional": list(self.optional_fields),
            },
            "builders": {name: _plain(asdict(b)) for name, b in sorted(self.builders.items())},
            "fields": {name: _plain(asdict(f)) for name, f in sorted(self.fields.items())},
            "transformations": {
                name: _plain(asdict(t)) for name, t in sorted(self.transformations.items())
            },
            "provenance": dict(self.provenance),
        }
        return {**body, "sha256": facts_checksum(body)}


def _plain(value: Any) -> Any:
    """Tuples as lists and mappings as sorted dicts, so the JSON is canonical."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def facts_checksum(body: Mapping[str, Any]) -> str:
    """The facts file's ``sha256``: the hex digest of `body`'s canonical JSON."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def dumps(facts: EngineFacts) -> str:
    """The facts as the text of a facts file."""
    return json.dumps(facts.to_json(), indent=2, sort_keys=True) + "\n"


def write_facts(path: Path, facts: EngineFacts) -> None:
    """Write a facts file atomically (an older file at `path` is replaced whole or not at all)."""
    from conformance.runs.atomic import atomic_write_text

    atomic_write_text(path, dumps(facts))


def read_facts(path: Path) -> EngineFacts:
    """Read and check a facts file; `FactsError` names the file and what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise FactsError(f"{path}: cannot read the facts file: {error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise FactsError(f"{path}:{error.lineno}: not a JSON facts file: {error.msg}") from None
    return parse_facts(data, source=str(path))


def parse_facts(data: Any, *, source: str = "facts") -> EngineFacts:
    """Check the decoded JSON of a facts file and build `EngineFacts`."""
    if not isinstance(data, dict):
        raise FactsError(f"{source}: a facts file is a JSON object, not {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise FactsError(f"{source}: format {data.get('format')!r} is not {FORMAT!r}")
    body = {key: value for key, value in data.items() if key != "sha256"}
    if data.get("sha256") != facts_checksum(body):
        raise FactsError(
            f"{source}: its sha256 does not match its content (edited by hand, or cut short); "
            "measure the facts again"
        )
    try:
        return _build(data)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise FactsError(f"{source}: malformed facts: {error}") from None


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of strings")
    return tuple(value)


def _kinds(value: Any, where: str) -> tuple[str, ...]:
    kinds = _strings(value, where)
    unknown = sorted(set(kinds) - set(BATCH_KINDS))
    if unknown:
        raise ValueError(f"{where}: unknown batch kind(s) {unknown}; known: {list(BATCH_KINDS)}")
    return kinds


def _builder(name: str, raw: Mapping[str, Any]) -> BuilderFacts:
    where = f"builders.{name}"
    if raw["status"] not in BUILDER_STATUSES:
        raise ValueError(f"{where}.status {raw['status']!r} is not one of {BUILDER_STATUSES}")
    reads = {}
    for phase, names in raw["reads"].items():
        if phase not in PHASES:
            raise ValueError(f"{where}.reads: unknown phase {phase!r}; known: {list(PHASES)}")
        reads[phase] = _strings(names, f"{where}.reads.{phase}")
    return BuilderFacts(
        cls=str(raw["cls"]),
        bases=_strings(raw["bases"], f"{where}.bases"),
        status=raw["status"],
        reason=str(raw["reason"]),
        batch_kinds=_kinds(raw["batch_kinds"], f"{where}.batch_kinds"),
        reads=reads,
        required={str(k): str(v) for k, v in raw["required"].items()},
        required_on_every_layer=_strings(
            raw["required_on_every_layer"], f"{where}.required_on_every_layer"
        ),
    )


def _build(data: Mapping[str, Any]) -> EngineFacts:
    record = data["record"]
    fields = {
        name: FieldFacts(
            optional=bool(raw["optional"]),
            needed_by={
                builder: _kinds(kinds, f"fields.{name}.needed_by.{builder}")
                for builder, kinds in raw["needed_by"].items()
            },
            errors={str(k): str(v) for k, v in raw["errors"].items()},
        )
        for name, raw in data["fields"].items()
    }
    transformations = {
        name: TransformFacts(
            ran=bool(raw["ran"]),
            dropped=_strings(raw["dropped"], f"transformations.{name}.dropped"),
            reason=str(raw["reason"]),
        )
        for name, raw in data["transformations"].items()
    }
    return EngineFacts(
        engine=str(data["engine"]),
        version=str(data["version"]),
        record_class=str(record["class"]),
        record_fields=_strings(record["fields"], "record.fields"),
        optional_fields=_strings(record["optional"], "record.optional"),
        builders={name: _builder(name, raw) for name, raw in data["builders"].items()},
        fields=fields,
        transformations=transformations,
        provenance=dict(data.get("provenance", {})),
    )


def check_version(facts: EngineFacts, *, engine: str, version: str | None, source: str) -> None:
    """Refuse facts measured on another engine or release than the tree being judged."""
    if facts.engine != engine:
        raise FactsError(f"{source}: facts of engine {facts.engine!r}, the tree is {engine!r}")
    if version is not None and facts.version != version:
        raise FactsError(
            f"{source}: facts measured on {facts.engine} {facts.version}, the tree is "
            f"{engine} {version}; measure them on that release (nox -s {engine} -- "
            f"--{engine}-version {version})"
        )
