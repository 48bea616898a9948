"""MLA dimensions, model presets and `get_mla_dims` (modelled on vLLM's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


@dataclass(frozen=True)
class MLADims:
    """The five MLA dimensions a metadata builder reads from a layer."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def cache_width(self) -> int:
        """Width of one latent KV-cache row: latent plus rope key (576 for DeepSeek)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width before absorption (192 for DeepSeek)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


MLA_DIM_NAMES: tuple[str, ...] = (
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)


@dataclass(frozen=True)
class ModelConfig:
    """The slice of a model configuration the suite needs: name, dims, heads."""

    name: str
    dims: MLADims
    num_attention_heads: int
    num_hidden_layers: int = 1

    @property
    def hf_text_config(self) -> SimpleNamespace:
        """A Hugging Face-style config object, as `get_mla_dims` reads it."""
        return SimpleNamespace(
            num_attention_heads=self.num_attention_heads,
            num_hidden_layers=self.num_hidden_layers,
            **{name: getattr(self.dims, name) for name in MLA_DIM_NAMES},
        )


DEEPSEEK_R1 = ModelConfig(
    name="deepseek-ai/DeepSeek-R1",
    dims=MLADims(1536, 512, 128, 64, 128),
    num_attention_heads=128,
    num_hidden_layers=61,
)
DEEPSEEK_V3 = ModelConfig(
    name="deepseek-ai/DeepSeek-V3",
    dims=DEEPSEEK_R1.dims,
    num_attention_heads=128,
    num_hidden_layers=61,
)
DEEPSEEK_V2_LITE = ModelConfig(
    name="deepseek-ai/DeepSeek-V2-Lite",
    dims=MLADims(None, 512, 128, 64, 128),
    num_attention_heads=16,
    num_hidden_layers=27,
)

MODEL_PRESETS: Mapping[str, ModelConfig] = {
    m.name: m for m in (DEEPSEEK_R1, DEEPSEEK_V3, DEEPSEEK_V2_LITE)
}


def get_model_config(name: str) -> ModelConfig:
    """Return the preset called `name`; the error lists the known presets."""
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(MODEL_PRESETS))
        raise KeyError(f"unknown model preset {name!r}; known presets: {known}") from None


def get_mla_dims(model_config: Any) -> MLADims:
    """Read the MLA dims from a model config's `hf_text_config` (vLLM's rule).

    Accepts a `ModelConfig`, or any object with an `hf_text_config` attribute, or a
    config object carrying the five attributes directly.
    """
    cfg = getattr(model_config, "hf_text_config", model_config)
    missing = [n for n in MLA_DIM_NAMES[1:] if not hasattr(cfg, n)]
    if missing:
        raise AttributeError(f"model config lacks MLA attribute(s): {', '.join(missing)}")
    return MLADims(
        q_lora_rank=getattr(cfg, "q_lora_rank", None),
        kv_lora_rank=cfg.kv_lora_rank,
        qk_nope_head_dim=cfg.qk_nope_head_dim,
        qk_rope_head_dim=cfg.qk_rope_head_dim,
        v_head_dim=cfg.v_head_dim,
    )


def heads_per_rank(model_config: ModelConfig, tensor_parallel_size: int) -> int:
    """Query heads each rank holds under tensor parallelism (R1 at TP8 gives 16)."""
    heads = model_config.num_attention_heads
    if tensor_parallel_size < 1 or heads % tensor_parallel_size:
        raise ValueError(
            f"tensor_parallel_size: expected a divisor of {heads} heads, "
            f"found {tensor_parallel_size}"
        )
    return heads // tensor_parallel_size
