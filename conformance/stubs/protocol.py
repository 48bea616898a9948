"""Layer objects as metadata builders see them, and the attributes builders read.

Builders look layers up by name in a `static_forward_context`-like mapping (vLLM's
`compilation_config.static_forward_context`) and read MLA dims and the prefill backend
from them (vLLM #51255). The attribute set a builder reads is its *layer protocol*;
attribute paths are dotted (``prefill_backend.clone`` is a call on an attribute).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance.metadata.dims import MLA_DIM_NAMES, MLADims

# What every MLA builder of this suite reads from the first layer (vLLM since #51255/#46993).
MLA_BUILDER_LAYER_PROTOCOL: frozenset[str] = frozenset(
    {"prefill_backend", "prefill_backend.clone", *MLA_DIM_NAMES}
)


class AttentionLayerBase:
    """Marker base class of attention layers (type-filtered lookups select on it)."""


class ReferencePrefillBackend:
    """The prefill backend object a layer carries; builders clone it per builder (#46993)."""

    def __init__(self) -> None:
        self.prepared: Any = None

    def clone(self) -> ReferencePrefillBackend:
        """A fresh backend for one builder, so micro-batch builders never share state."""
        return ReferencePrefillBackend()

    def prepare_metadata(self, prefill_metadata: Any) -> None:
        """Store the prefill metadata this backend will run with."""
        self.prepared = prefill_metadata


@dataclass
class AttentionImpl:
    """The per-layer attention implementation a layer holds."""

    num_heads: int
    scale: float
    kv_cache_dtype: str = "auto"


@dataclass
class MLAAttentionLayer(AttentionLayerBase):
    """A real MLA attention layer, as registered in a `static_forward_context`."""

    dims: MLADims
    num_heads: int
    prefill_backend: ReferencePrefillBackend = field(default_factory=ReferencePrefillBackend)
    kv_cache_dtype: str = "auto"
    impl: AttentionImpl | None = None

    def __post_init__(self) -> None:
        if self.impl is None:
            scale = self.dims.qk_head_dim**-0.5
            self.impl = AttentionImpl(self.num_heads, scale, self.kv_cache_dtype)

    def __getattr__(self, name: str) -> Any:
        # The five dims are read as plain attributes, as vLLM's layer exposes them.
        dims = self.__dict__.get("dims")
        if name in MLA_DIM_NAMES and dims is not None:
            return getattr(dims, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
