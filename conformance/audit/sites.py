"""Where an engine builds its record and hands its builders their inputs: what the audit
looks for in a tree of that engine, declared once per engine (`ENGINE_SITES`).

vLLM builds ``CommonAttentionMetadata`` and hands it to each metadata builder's ``build``;
its builders read their layers out of a ``static_forward_context``. SGLang builds
``ForwardBatch`` (and fills fields after construction), hands it to each attention
backend's ``init_forward_metadata``, and constructs each backend over a model runner,
through the registry ``ATTENTION_BACKENDS``; its layers (``RadixAttention``) are handed to
the backend at forward time (``backend.forward_decode(q, k, v, layer, forward_batch)``). A
facts file names its engine (`EngineFacts.engine`) and its record class; `sites_for` gives
the engine's sites and refuses facts whose record is not the engine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from conformance.engines.facts import EngineFacts, FactsError

_ALL_CAM = ("CAM001", "CAM002", "CAM003", "CAM004", "CAM005", "CAM006", "CAM007")


@dataclass(frozen=True)
class EngineSites:
    """One engine's record, builders and layers, as the audit finds them in source."""

    engine: str
    """The engine's package name, as facts files and tree versions name it (``vllm``)."""
    record: str
    """The record class's name (``CommonAttentionMetadata``)."""
    record_mentions: tuple[str, ...]
    """Words a file holding a construction or a consumer of the record mentions."""
    record_params: frozenset[str]
    """Parameter names that hold the record (a parameter annotated with `record` does too)."""
    builder_entry: str
    """The builder method the engine calls with the record; named first in messages."""
    consumer_method: str
    """A class consumes the record only when it has this method ("": any class with a method
    taking the record). SGLang's model runners, models and graph runners take the batch
    too; its consumers are the attention backends (``init_forward_metadata``)."""
    layer: str
    """The engine's attention layer class (``AttentionLayerBase``, ``RadixAttention``)."""
    rules: tuple[str, ...]
    """The codes of the rules that judge this engine's trees, in the rule table's order."""
    layer_context: str = ""
    """Where layer stubs are stored for the builders (``static_forward_context``); "": none."""
    typed_lookup: str = ""
    """A layer lookup that yields layers of one type (``get_layers_from_vllm_config``)."""
    builder_getters: frozenset[str] = frozenset()
    """A backend's methods that return its builder class (``get_builder_cls``)."""
    speculative: frozenset[str] = frozenset()
    """Names that mark a scope setting up speculative decoding (its batches are decodes)."""
    filled_later: bool = False
    """Fields assigned on the local a construction is bound to (``batch.f = ...``, later in the
    same function) count as passed: the record is filled after it is built."""
    mode_field: str = ""
    """The record field that says which kind of batch it is (``forward_mode``)."""
    mode_kinds: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """A mode member passed literally (``ForwardMode.DECODE``) → the measured batch kinds it
    builds; a member not listed builds none the facts measured."""
    registries: frozenset[str] = frozenset()
    """Dotted module-level registries of builders keyed by the names the facts measured
    (``...attention_registry.ATTENTION_BACKENDS``): naming one is a run-time choice."""
    runner: str = ""
    """The builders' constructor argument, judged as a stub (``model_runner``); "": none."""
    builder_suffix: str = ""
    """How the engine's builder class names end (``Backend``): a call ``...Backend(x)`` may
    hand a runner stub to a builder (the audit resolves the name before judging)."""
    layer_param: str = ""
    """The parameter of a builder method of `layer_calls` that holds the layer (SGLang's
    backends: ``layer``): what the method reads from it are layer reads."""
    layer_position: int = 0
    """Where a call of one of `layer_calls` passes the layer, when not as `layer_param`=."""
    layer_calls: frozenset[str] = frozenset()
    """Builder methods a layer is handed to at forward time (``forward_decode``): the layer
    argument of ``backend.forward_decode(q, k, v, layer, forward_batch)`` is a layer stub.
    Not anchors: a file that can reach a builder names it (``Backend(``, a registry)."""
    measured_layer_method: str = ""
    """The builder method measured facts ran a layer through (SGLang: ``forward_decode``, one
    decode forward; the layer requirements are the facts' provenance ``layer_required``);
    "": the builders' own ``required`` are their layers' (vLLM)."""

    @property
    def anchors(self) -> tuple[bytes, ...]:
        """Words that make a file worth parsing at once (the others only when resolved into)."""
        words = [*self.record_mentions, self.layer_context, self.typed_lookup, "__new__"]
        words += [r.rsplit(".", 1)[-1] for r in sorted(self.registries)]
        words += [f"{self.builder_suffix}("] if self.builder_suffix else []
        return tuple(w.encode("ascii") for w in words if w)

    def mode_of(self, member: str | None) -> tuple[str, ...] | None:
        """The batch kinds a site passing mode `member` (``ForwardMode.DECODE``) builds; None
        when it passes none literally (any kind)."""
        if not self.mode_field or not member:
            return None
        return self.mode_kinds.get(member.rsplit(".", 1)[-1], ())


VLLM = EngineSites(
    engine="vllm",
    record="CommonAttentionMetadata",
    record_mentions=("CommonAttentionMetadata", "common_attn_metadata"),
    record_params=frozenset({"common_attn_metadata", "common_metadata"}),
    builder_entry="build",
    consumer_method="",
    layer="AttentionLayerBase",
    rules=(*_ALL_CAM, "STUB001", "STUB002", "STUB003", "STUB004"),
    layer_context="static_forward_context",
    typed_lookup="get_layers_from_vllm_config",
    builder_getters=frozenset({"get_builder_cls"}),
    speculative=frozenset({"speculative_config", "SpeculativeConfig", "num_speculative_tokens"}),
)

SGLANG = EngineSites(
    engine="sglang",
    record="ForwardBatch",
    record_mentions=("ForwardBatch", "forward_batch"),
    record_params=frozenset({"forward_batch"}),
    builder_entry="init_forward_metadata",
    consumer_method="init_forward_metadata",
    layer="RadixAttention",
    rules=(*_ALL_CAM, "STUB001", "STUB002", "STUB004", "STUB005"),
    filled_later=True,
    mode_field="forward_mode",
    mode_kinds=MappingProxyType(
        {"DECODE": ("decode",), "MIXED": ("mixed",), "EXTEND": ("prefill",), "IDLE": ()}
    ),
    registries=frozenset({"sglang.srt.layers.attention.attention_registry.ATTENTION_BACKENDS"}),
    runner="model_runner",
    builder_suffix="Backend",
    layer_param="layer",
    layer_position=3,
    layer_calls=frozenset({"forward", "forward_decode", "forward_extend"}),
    measured_layer_method="forward_decode",
)

ENGINE_SITES: Mapping[str, EngineSites] = MappingProxyType({s.engine: s for s in (VLLM, SGLANG)})
"""Every engine the audit knows, by name."""


def sites_of(engine: str) -> EngineSites:
    """The sites of `engine`; a `ValueError` names the known engines."""
    try:
        return ENGINE_SITES[engine]
    except KeyError:
        raise ValueError(f"engine {engine!r}: the audit knows {', '.join(ENGINE_SITES)}") from None


def sites_for(facts: EngineFacts, source: str = "facts") -> EngineSites:
    """The sites of the engine `facts` were measured on; `FactsError` when the audit does
    not know that engine, or the facts' record class is not the engine's record."""
    sites = ENGINE_SITES.get(facts.engine)
    if sites is None:
        raise FactsError(
            f"{source}: facts of engine {facts.engine!r}; the audit knows {', '.join(ENGINE_SITES)}"
        )
    name = facts.record_class.rsplit(".", 1)[-1]
    if name != sites.record:
        raise FactsError(
            f"{source}: record.class {facts.record_class!r} is not {facts.engine}'s record "
            f"{sites.record}"
        )
    return sites
