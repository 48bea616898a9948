"""Everything a backend plug-in imports, from one place.

A plug-in backend (docs/plugins.md) subclasses `Backend` and declares itself with class
attributes; its builder is usually `PlanFreeBuilder` (or `MLACommonBuilder` for one that
executes AITER v1 work plans); its builder reads `MLA_BUILDER_LAYER_PROTOCOL` from layers::

    from backends.api import Availability, Backend, PlanFreeBuilder, MLA_BUILDER_LAYER_PROTOCOL

The names live in `backends.base`, `backends.common`, `conformance.applicability`,
`conformance.stubs.protocol` and `conformance.metadata`; this module is the face the suite
keeps stable for plug-ins.
"""

from __future__ import annotations

from backends.base import (
    PLAN_FORMATS,
    Availability,
    Backend,
    BuilderConfig,
    ChunkedContext,
    DecodeMetadata,
    DecodeScales,
    KVCacheSpec,
    MetadataBuilder,
    MLAMetadata,
    PrefillMetadata,
    csr_arguments,
    require_plan,
)
from backends.common import MLACommonBuilder, PlanExecutingBackend, PlanFreeBuilder, paged_csr
from conformance.applicability import AITER_V1, NOT_APPLICABLE, dtype_label
from conformance.metadata import CommonAttentionMetadata
from conformance.metadata.dims import DEEPSEEK_R1, ModelConfig
from conformance.stubs.protocol import (
    MLA_BUILDER_LAYER_PROTOCOL,
    AttentionLayerBase,
    MLAAttentionLayer,
    ReferencePrefillBackend,
)
from conformance.targets import DEVICE_KINDS

__all__ = [
    "AITER_V1",
    "DEEPSEEK_R1",
    "DEVICE_KINDS",
    "MLA_BUILDER_LAYER_PROTOCOL",
    "NOT_APPLICABLE",
    "PLAN_FORMATS",
    "AttentionLayerBase",
    "Availability",
    "Backend",
    "BuilderConfig",
    "ChunkedContext",
    "CommonAttentionMetadata",
    "DecodeMetadata",
    "DecodeScales",
    "KVCacheSpec",
    "MLAAttentionLayer",
    "MLACommonBuilder",
    "MLAMetadata",
    "MetadataBuilder",
    "ModelConfig",
    "PlanExecutingBackend",
    "PlanFreeBuilder",
    "PrefillMetadata",
    "ReferencePrefillBackend",
    "csr_arguments",
    "dtype_label",
    "paged_csr",
    "require_plan",
]
