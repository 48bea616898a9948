"""Layer stubs that follow the checkpoint, stub completeness checks, layer-protocol diffs.

- `make_layer_stub(model_config or MLADims, **extra)`: a layer stub whose MLA dims come
  from the model config (the vLLM #52139 fix), an `AttentionLayerBase` instance carrying a
  real `ReferencePrefillBackend`, that remembers where it was built and raises
  `StubIncompleteError` on any attribute it lacks.
- `stub_problems` / `require_complete_stub` / `require_complete_context`: the dynamic
  completeness check of any stub object against a layer protocol.
- `record_builder_reads` + `compare_layer_protocol` (from `protocol_diff`, re-exported
  here): run a real builder against a recording layer and diff what it read with what its
  backend declares.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from conformance.metadata.dims import MLA_DIM_NAMES, MLADims, get_mla_dims, get_model_config
from conformance.stubs.protocol import (
    MLA_BUILDER_LAYER_PROTOCOL,
    AttentionImpl,
    AttentionLayerBase,
    ReferencePrefillBackend,
)
from conformance.stubs.protocol_diff import (
    STUB_LAYER_NAME,
    ProtocolDiff,
    assert_layer_protocol_matches,
    compare_layer_protocol,
    record_builder_reads,
)
from conformance.stubs.recorder import (
    STUB_SITE_ATTRIBUTE,
    BuildSite,
    caller_site,
    describe_stub,
    site_of,
    stub_incomplete,
)

# ---------------------------------------------------------------------------- the factory


class LayerStub(AttentionLayerBase):
    """A layer stub with exactly the attributes it was given.

    Reading any other attribute raises `StubIncompleteError` naming it, the stub and the
    place the stub was built (so ``hasattr`` answers False, as for any `AttributeError`).
    """

    def __init__(self, attributes: Mapping[str, Any], *, name: str, built_at: BuildSite) -> None:
        self.__dict__.update(attributes)
        self.__dict__["_stub_name"] = name
        self.__dict__[STUB_SITE_ATTRIBUTE] = built_at

    def __getattr__(self, name: str) -> Any:
        __tracebackhide__ = True
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise stub_incomplete(
            name,
            stub=describe_stub(self, self.__dict__.get("_stub_name")),
            built_at=self.__dict__.get(STUB_SITE_ATTRIBUTE),
        )

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{k}={v!r}" for k, v in self.__dict__.items() if not k.startswith("_stub_")
        )
        return f"LayerStub({shown}) built at {self.__dict__.get(STUB_SITE_ATTRIBUTE)}"


def _dims_and_heads(source: Any) -> tuple[MLADims, int | None, str]:
    if isinstance(source, str):
        source = get_model_config(source)
    if isinstance(source, MLADims):
        return source, None, "MLADims"
    dims = get_mla_dims(source)
    heads = getattr(getattr(source, "hf_text_config", source), "num_attention_heads", None)
    return dims, heads, str(getattr(source, "name", type(source).__name__))


def _providers(dims: MLADims, heads: int | None) -> dict[str, Callable[[], Any]]:
    def impl() -> AttentionImpl:
        if heads is None:
            raise ValueError(
                "make_layer_stub: the protocol needs 'impl' but the number of heads is unknown "
                "(an MLADims source has none); pass num_heads=... or impl=..."
            )
        return AttentionImpl(num_heads=heads, scale=dims.qk_head_dim**-0.5)

    providers: dict[str, Callable[[], Any]] = {
        name: (lambda n=name: getattr(dims, n)) for name in MLA_DIM_NAMES
    }
    providers["prefill_backend"] = ReferencePrefillBackend
    providers["impl"] = impl
    providers["kv_cache_dtype"] = lambda: "auto"
    if heads is not None:
        providers["num_heads"] = lambda: heads
    return providers


def _resolve(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _hide(value: Any, paths: Collection[str], prefix: str, stub: str, site: BuildSite) -> Any:
    """A copy of `value` whose dotted `paths` (relative to it) raise `StubIncompleteError`."""
    hidden = {p for p in paths if "." not in p}
    nested: dict[str, list[str]] = {}
    for p in paths:
        if "." in p:
            head, rest = p.split(".", 1)
            nested.setdefault(head, []).append(rest)
    clone = copy.copy(value)
    for head, rests in nested.items():
        child = getattr(value, head)
        setattr(clone, head, _hide(child, rests, f"{prefix}.{head}", stub, site))
    if hidden:

        def __getattribute__(self: Any, name: str) -> Any:
            __tracebackhide__ = True
            if name in hidden:
                raise stub_incomplete(
                    f"{prefix}.{name}", stub=stub, built_at=site, detail="left out on purpose"
                )
            return base.__getattribute__(self, name)

        base = type(value)
        without = type(
            f"{base.__name__}Without_{'_'.join(sorted(hidden))}",
            (base,),
            {"__getattribute__": __getattribute__, "__module__": __name__},
        )
        try:
            clone.__class__ = without
        except TypeError as exc:
            raise ValueError(
                f"make_layer_stub: cannot leave {sorted(hidden)} out of {prefix!r} "
                f"({base.__name__} values do not allow it): {exc}"
            ) from None
    return clone


def make_layer_stub(
    source: Any,
    /,
    *,
    protocol: Iterable[str] = MLA_BUILDER_LAYER_PROTOCOL,
    omit: Iterable[str] = (),
    **extra: Any,
) -> LayerStub:
    """A layer stub complete for `protocol`, with dims from `source`.

    `source` is a `ModelConfig` (or any object `get_mla_dims` reads, or a preset name):
    the stub's dims follow that checkpoint, as vLLM #52139 does; an `MLADims` gives them
    directly. Every top-level name in `protocol` gets a value: from `extra` if given, else
    the standard one (the five dims, a fresh `ReferencePrefillBackend`, ``impl``,
    ``num_heads``, ``kv_cache_dtype``); a name with no value raises `ValueError`. `extra`
    attributes are always set. `omit` leaves dotted paths out (``prefill_backend.clone``
    hides ``clone`` on a copy of the prefill backend): reading one raises
    `StubIncompleteError`. The stub records the caller's file and line.
    """
    site = caller_site()
    dims, heads, label = _dims_and_heads(source)
    if "num_heads" in extra:
        heads = extra["num_heads"]
    required = frozenset(protocol)
    omitted = frozenset(omit)
    providers = _providers(dims, heads)
    attributes: dict[str, Any] = {}
    for top in sorted({p.split(".", 1)[0] for p in required} - set(extra)):
        if top in omitted:
            continue
        if top not in providers:
            raise ValueError(
                f"make_layer_stub: no standard value for protocol attribute {top!r}; "
                f"pass it as {top}=..."
            )
        attributes[top] = providers[top]()
    attributes.update(extra)
    for path in sorted(required):
        top = path.split(".", 1)[0]
        if top in omitted or path in omitted or "." not in path:
            continue
        try:
            _resolve(attributes[top], path.split(".", 1)[1])
        except AttributeError:
            raise ValueError(
                f"make_layer_stub: protocol path {path!r} does not resolve on the value of "
                f"{top!r} ({type(attributes[top]).__name__}); pass {top}=... that has it"
            ) from None
    stub_name = f"LayerStub {label!r}"
    for path in sorted(omitted):
        top = path.split(".", 1)[0]
        if "." not in path:
            if path not in required and path not in attributes:
                raise ValueError(f"make_layer_stub: omit names {path!r}, which the stub lacks")
            attributes.pop(path, None)
            continue
        if top not in attributes:
            raise ValueError(f"make_layer_stub: omit names {path!r}, but {top!r} is left out")
    for top in sorted({p.split(".", 1)[0] for p in omitted if "." in p}):
        rests = [p.split(".", 1)[1] for p in omitted if p.startswith(f"{top}.")]
        attributes[top] = _hide(attributes[top], rests, top, stub_name, site)
    return LayerStub(attributes, name=label, built_at=site)


# ---------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class StubProblem:
    """One reason a stub is incomplete or works only by accident."""

    path: str
    """The attribute path concerned (``<class>`` for the stub's class)."""
    kind: str
    """``missing``, ``accidental`` (a tensor stands in for an object) or ``class``."""
    message: str


def stub_problems(stub: Any, protocol: Iterable[str]) -> list[StubProblem]:
    """Everything wrong with `stub` for `protocol` (empty: complete): missing paths first.

    Flags a stub that is not an `AttentionLayerBase` (type-filtered lookups skip it
    silently), every protocol path that does not resolve, and paths that resolve only
    because a tensor stands in for an object (``prefill_backend=torch.empty(1)`` has a
    ``clone`` by accident, vLLM #52139).
    """
    missing: list[StubProblem] = []
    accidental: list[StubProblem] = []
    for path in sorted(frozenset(protocol)):
        parts = path.split(".")
        value = stub
        for depth, part in enumerate(parts):
            if depth and isinstance(value, torch.Tensor):
                parent = ".".join(parts[:depth])
                accidental.append(
                    StubProblem(
                        path,
                        "accidental",
                        f"{parent!r} is a torch.Tensor; {path!r} resolves only by accident",
                    )
                )
                break
            try:
                value = getattr(value, part)
            except AttributeError:
                missing.append(StubProblem(path, "missing", f"lacks {path!r}"))
                break
    problems = missing + accidental
    if not isinstance(stub, AttentionLayerBase):
        problems.append(
            StubProblem(
                "<class>",
                "class",
                f"{type(stub).__name__} is not an AttentionLayerBase subclass "
                "(type-filtered layer lookups skip it silently)",
            )
        )
    return problems


def require_complete_stub(
    stub: Any,
    protocol: Iterable[str],
    *,
    name: str | None = None,
    built_at: BuildSite | str | None = None,
) -> None:
    """Raise `StubIncompleteError` naming every problem `stub_problems` finds.

    The error's ``path`` is the first problem's path; the message names the stub (`name`,
    e.g. its key in the context) and where it was built (`built_at`, else `site_of`).
    """
    __tracebackhide__ = True
    problems = stub_problems(stub, protocol)
    if not problems:
        return
    site = built_at if built_at is not None else site_of(stub)
    missing = [p.path for p in problems if p.kind == "missing"]
    problem = (
        f"lacks layer-protocol attribute(s) {', '.join(repr(p) for p in missing)}"
        if missing
        else "is not a faithful layer stub"
    )
    raise stub_incomplete(
        problems[0].path,
        stub=describe_stub(stub, name),
        built_at=site,
        problem=problem,
        detail="; ".join(p.message for p in problems),
    )


def require_complete_context(
    context: Mapping[str, Any],
    protocol: Iterable[str],
    layer_names: Sequence[str] | None = None,
) -> None:
    """`require_complete_stub` for each layer of a `static_forward_context` (all, or
    `layer_names`), each named by its key."""
    __tracebackhide__ = True
    required = frozenset(protocol)
    for key in context if layer_names is None else layer_names:
        require_complete_stub(context[key], required, name=key)


__all__ = [
    "STUB_LAYER_NAME",
    "LayerStub",
    "ProtocolDiff",
    "StubProblem",
    "assert_layer_protocol_matches",
    "compare_layer_protocol",
    "make_layer_stub",
    "record_builder_reads",
    "require_complete_context",
    "require_complete_stub",
    "stub_problems",
]
