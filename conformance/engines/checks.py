"""Engine-independent checks of an engine's own record, builders and layers.

Each function takes the engine's pieces as arguments (its record class, a function that
builds with one of its builders, a layer factory), so the same code judges vLLM in the
vllm session and a fake engine in the selftests. Failures are data (`Outcome`), named by
the field, attribute or argument at fault; the tests turn them into assertions.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.stubs.recorder import log_of, record_layer

MISSING_VALUE = dataclasses.MISSING


class EngineRecordError(ValueError):
    """The engine's record cannot be built from the suite's batch; names the field."""


@dataclass(frozen=True)
class Outcome:
    """One attempt: did it succeed, and the one-line error if not."""

    ok: bool
    error: str = ""


def one_line(error: BaseException) -> str:
    """``Type: message`` on one line; a bare assert names the file and line that raised it."""
    text = " ".join(str(error).split())
    if not text:
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
        text = f"(no message) at {where}"
    return f"{type(error).__name__}: {text}"[:300]


def grouped_reasons(errors: Mapping[str, str]) -> str:
    """``{"decode": e, "mixed": e, "prefill": f}`` → ``"decode, mixed: e; prefill: f"``: each
    distinct error said once, after the batch kinds that met it."""
    kinds: dict[str, list[str]] = {}
    for kind, error in errors.items():
        kinds.setdefault(error, []).append(kind)
    return "; ".join(f"{', '.join(names)}: {error}" for error, names in kinds.items())


def attempt(action: Callable[[], Any]) -> Outcome:
    """Run `action`; any exception becomes a failed `Outcome` naming it."""
    try:
        action()
    except Exception as error:  # the engine's own code: every failure is a finding
        return Outcome(False, one_line(error))
    return Outcome(True)


# ---------------------------------------------------------------------- the record


def record_fields(record_cls: type) -> tuple[str, ...]:
    """The engine record's field names, read from its dataclass (never copied)."""
    return tuple(f.name for f in dataclasses.fields(record_cls))


def dotted_name(cls: type) -> str:
    """``module.qualname`` of `cls`: how a facts file names a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def base_names(cls: type) -> tuple[str, ...]:
    """The dotted names of `cls`'s bases in resolution order, ``object`` left out."""
    return tuple(dotted_name(base) for base in cls.__mro__[1:-1])


def record_facts(record_cls: type) -> dict[str, Any]:
    """The `EngineFacts` fields that describe the record class: its dotted name, its fields
    and the optional ones."""
    return {
        "record_class": dotted_name(record_cls),
        "record_fields": record_fields(record_cls),
        "optional_fields": optional_fields(record_cls),
    }


def optional_fields(record_cls: type) -> tuple[str, ...]:
    """Public fields with a default: the ones a construction site may leave out."""
    return tuple(
        f.name
        for f in dataclasses.fields(record_cls)
        if not f.name.startswith("_")
        and (f.default is not MISSING_VALUE or f.default_factory is not MISSING_VALUE)
    )


def required_fields(record_cls: type) -> tuple[str, ...]:
    """Fields without a default."""
    optional = set(optional_fields(record_cls))
    return tuple(
        n for n in record_fields(record_cls) if n not in optional and not n.startswith("_")
    )


def to_engine_record(suite_record: Any, record_cls: type, *, omit: Iterable[str] = ()) -> Any:
    """The engine's own record with the suite record's values; `omit` left at the default.

    A required engine field the suite does not produce is an `EngineRecordError` naming it.
    """
    omitted = set(omit)
    unknown = omitted - set(record_fields(record_cls))
    if unknown:
        raise EngineRecordError(f"{record_cls.__name__} has no field(s) {sorted(unknown)}")
    values = {}
    for field in dataclasses.fields(record_cls):
        if field.name in omitted or not field.init:
            continue
        value = getattr(suite_record, field.name, None)
        if value is None:
            if field.name in required_fields(record_cls):
                raise EngineRecordError(
                    f"{record_cls.__name__}.{field.name} is required and the suite's batch "
                    "has no value for it"
                )
            continue
        values[field.name] = value
    required = set(required_fields(record_cls)) & omitted
    if required:
        raise EngineRecordError(f"cannot omit required field(s) {sorted(required)}")
    return record_cls(**values)


class ValidatorView:
    """An engine record as the suite's validator reads it: fields it lacks read as None."""

    def __init__(self, record: Any) -> None:
        self._record = record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._record, name, None)


def set_fields(record: Any) -> frozenset[str]:
    """Public fields of `record` that hold a value (not None)."""
    return frozenset(
        f.name
        for f in dataclasses.fields(record)
        if not f.name.startswith("_") and getattr(record, f.name) is not None
    )


def dropped_fields(before: Any, after: Any) -> tuple[str, ...]:
    """Fields set on the record going in and unset on the record coming out."""
    return tuple(sorted(set_fields(before) - set_fields(after)))


def field_needs(
    build: Callable[[str, Any], Any],
    builders: Iterable[str],
    records: Mapping[str, Callable[[Iterable[str]], Any]],
    fields: Iterable[str],
) -> dict[str, dict[str, str]]:
    """field → {"BUILDER/kind": error} for every build that failed with the field unset.

    `records[kind](omit)` makes the engine record of one batch kind without `omit`;
    `build(builder, record)` builds with one builder. A build that fails with every field
    set is not counted against any field (its baseline failure is the builder's status).
    """
    names = list(builders)
    baseline = {
        (b, kind): attempt(lambda b=b, make=make: build(b, make(()))).ok
        for b in names
        for kind, make in records.items()
    }
    needs: dict[str, dict[str, str]] = {}
    for name in fields:
        for (builder, kind), ok in baseline.items():
            if not ok:
                continue
            outcome = attempt(lambda b=builder, k=kind, n=name: build(b, records[k]((n,))))
            if not outcome.ok:
                needs.setdefault(name, {})[f"{builder}/{kind}"] = outcome.error
    return needs


def construction_problems(
    record: Any, kind: str, builder: str, fields: Mapping[str, Any]
) -> list[str]:
    """Fields `builder` was measured to need on `kind` batches that `record` leaves unset.

    `fields` maps a field name to its facts (``needed_by``: builder → batch kinds, and
    ``errors``: "BUILDER/kind" → the error seen), as in a facts file.
    """
    problems = []
    for name, facts in sorted(fields.items()):
        if kind in facts.needed_by.get(builder, ()) and getattr(record, name, None) is None:
            seen = facts.errors.get(f"{builder}/{kind}", "")
            problems.append(
                f"{name}: unset, and {builder} needs it on {kind} batches (measured: {seen})"
            )
    return problems


# ---------------------------------------------------------------------- the layers


@dataclass(frozen=True)
class LayerReads:
    """What a builder read from its layers: first layer and later layers, per phase."""

    first: Mapping[str, frozenset[str]]
    later: Mapping[str, frozenset[str]]
    missing: frozenset[str]


def top_level(paths: Iterable[str]) -> tuple[str, ...]:
    """The attribute names at the top of dotted read paths, sorted."""
    return tuple(sorted({path.split(".", 1)[0] for path in paths}))


def record_reads(
    construct: Callable[[Mapping[str, Any]], Any],
    build: Callable[[Any], Any],
    make_layer: Callable[[], Any],
    layer_names: tuple[str, ...],
) -> LayerReads:
    """Wrap every layer in the suite's recorder (lenient) and run ``__init__`` then build."""
    proxies = {name: record_layer(make_layer(), name=name, strict=False) for name in layer_names}
    logs = [log_of(proxy) for proxy in proxies.values()]
    for log in logs:
        log.current_phase = "init"
    builder = construct(proxies)
    for log in logs:
        log.current_phase = "build"
    build(builder)
    phases = ("init", "build")
    later = {p: frozenset().union(*(log.reads(p) for log in logs[1:])) for p in phases}
    return LayerReads(
        first={p: logs[0].reads(p) for p in phases},
        later=later,
        missing=frozenset().union(*(log.missing for log in logs)),
    )


def leave_one_out(
    construct_and_build: Callable[[Mapping[str, Any]], Any],
    make_layer: Callable[..., Any],
    layer_names: tuple[str, ...],
    attributes: Iterable[str],
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Which read attributes the builder cannot do without.

    Returns (attribute → error when the first layer lacks it, attributes whose absence
    on a later layer only also fails). ``make_layer(omit=(name,))`` makes a layer without it.
    """
    required: dict[str, str] = {}
    every_layer: list[str] = []
    for name in attributes:
        first = {n: make_layer(omit=(name,) if i == 0 else ()) for i, n in enumerate(layer_names)}
        outcome = attempt(lambda layers=first: construct_and_build(layers))
        if outcome.ok:
            continue
        required[name] = outcome.error
        if len(layer_names) > 1:
            later = {
                n: make_layer(omit=(name,) if i > 0 else ()) for i, n in enumerate(layer_names)
            }
            if not attempt(lambda layers=later: construct_and_build(layers)).ok:
                every_layer.append(name)
    return required, tuple(every_layer)


# ---------------------------------------------------------------------- the planner


def planner_dtype_problems(arguments: Mapping[str, Any], q_dtype: Any, kv_dtype: Any) -> list[str]:
    """What is wrong with a ``get_mla_metadata_v1`` call's dtypes for a run of q/kv dtypes.

    AITER reads ``dtype_q_nope``/``dtype_kv_nope`` first, then the legacy ``dtype_q``/
    ``dtype_kv``; None means bf16 (#46997: an fp8 run planned as bf16).
    """
    problems = []
    for role, expected in (("q", q_dtype), ("kv", kv_dtype)):
        given = arguments.get(f"dtype_{role}_nope") or arguments.get(f"dtype_{role}")
        if given != expected:
            problems.append(
                f"planner call: dtype_{role} is {given} (None plans as bf16), the run's "
                f"{role} dtype is {expected}"
            )
    return problems
