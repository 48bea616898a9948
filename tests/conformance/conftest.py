"""Fixtures shared by the conformance families: layers, builder configs, builders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

from backends.base import Backend, BuilderConfig, KVCacheSpec, MetadataBuilder
from conformance.metadata.dims import DEEPSEEK_R1, ModelConfig
from conformance.stubs.protocol import MLAAttentionLayer

LAYER_NAME = "model.layers.0.self_attn.attn"


def make_layer_context(model: ModelConfig = DEEPSEEK_R1, num_heads: int = 16) -> dict[str, Any]:
    """A `static_forward_context` holding one real MLA layer."""
    return {LAYER_NAME: MLAAttentionLayer(dims=model.dims, num_heads=num_heads)}


@pytest.fixture
def builder_config(backend: Backend) -> Callable[..., BuilderConfig]:
    """Factory of builder configs on the backend's device."""

    def make(*, block_size: int = 16, **changes: Any) -> BuilderConfig:
        base = BuilderConfig(
            kv_cache=KVCacheSpec(block_size=block_size, dtype=torch.bfloat16),
            device=str(backend.device),
            max_model_len=4096,
            max_num_seqs=64,
        )
        return replace(base, **changes)

    return make


@pytest.fixture
def make_builder(
    backend: Backend, builder_config: Callable[..., BuilderConfig]
) -> Callable[..., MetadataBuilder]:
    """Factory of the backend's builder over a context holding one real layer."""

    def make(context: dict[str, Any] | None = None, **config: Any) -> MetadataBuilder:
        ctx = make_layer_context() if context is None else context
        return backend.make_builder(builder_config(**config), [LAYER_NAME], ctx)

    return make


@pytest.fixture
def layer_protocol(backend: Backend) -> frozenset[str]:
    """Dotted attribute paths the backend declares its builder reads from layers."""
    return frozenset(backend.layer_protocol)


@pytest.fixture
def layer_name() -> str:
    """The name `make_builder` looks its layer up by in the `static_forward_context`."""
    return LAYER_NAME


@pytest.fixture
def real_layer() -> MLAAttentionLayer:
    """A real MLA layer, as `make_layer_context` registers it (DeepSeek-R1 dims, 16 heads)."""
    return make_layer_context()[LAYER_NAME]
