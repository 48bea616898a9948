"""SGLang's own model runner, `ForwardBatch` and MLA backends, made on a CPU.

`SglangEngine` holds one model runner (a `ModelRunner` subclass carrying what SGLang's
attention backends read at construction: the model config, real token pools, the device
and cache dtype) and constructs SGLang's real MLA backends through its own registry
(``attention_registry.ATTENTION_BACKENDS[name](runner)``); the "builder" of each backend is
its ``init_forward_metadata(forward_batch)``. `forward_batch` makes SGLang's `ForwardBatch`
from the suite's `BatchSpec`. The construction follows SGLang's own MLA test kit
(``sglang/test/kits/attention_unittest/attention_methods/mla_attention.py``) but is the
suite's: its model config carries ``dtype`` (which the kit's lacks, see `kit_config`).
The session sets ``CUDA_VISIBLE_DEVICES=`` and ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Iterable
from typing import Any

import torch

from conformance.engines.engine_backends import EngineBackend
from conformance.metadata.dims import DEEPSEEK_V3

DIMS = DEEPSEEK_V3.dims
MAX_CONTEXT_LEN = 2048
RECORD_MODULE = "sglang.srt.model_executor.forward_batch_info"
RECORD_CLASS = "ForwardBatch"
ATTENTION_PACKAGE = "sglang.srt.layers.attention"
LAYER_ID = 0


BACKENDS: dict[str, EngineBackend] = {
    "triton": EngineBackend("triton_backend", "TritonAttnBackend"),
    "torch_native": EngineBackend("torch_native_backend", "TorchNativeAttnBackend"),
    "flashinfer": EngineBackend("flashinfer_mla_backend", "FlashInferMLAAttnBackend"),
    "flashmla": EngineBackend("flashmla_backend", "FlashMLABackend", page_size=64),
    "trtllm_mla": EngineBackend("trtllm_mla_backend", "TRTLLMMLABackend", page_size=32),
    "cutedsl_mla": EngineBackend("cutedsl_mla_backend", "CuteDslMLABackend", page_size=32),
    "aiter": EngineBackend("aiter_backend", "AiterAttnBackend", cache_dtype="fp8", standin=True),
}


def backend_class(name: str) -> type:
    """The backend class of registry name `name`, imported from SGLang."""
    return BACKENDS[name].backend_class(ATTENTION_PACKAGE)


def record_class() -> type:
    """SGLang's `ForwardBatch`, as installed."""
    return getattr(importlib.import_module(RECORD_MODULE), RECORD_CLASS)


class SuiteModelConfig:
    """What SGLang's `ModelConfig` offers an MLA attention backend (DeepSeek-like dims)."""

    def __init__(self, *, heads: int, dtype: torch.dtype, omit: Iterable[str] = ()) -> None:
        from sglang.srt.configs.model_config import AttentionArch

        rank, rope = DIMS.kv_lora_rank, DIMS.qk_rope_head_dim
        values: dict[str, Any] = {
            "attention_arch": AttentionArch.MLA,
            "dtype": dtype,
            "context_len": MAX_CONTEXT_LEN,
            "hidden_size": 1024,
            "num_attention_heads": heads,
            "num_key_value_heads": 1,
            "kv_lora_rank": rank,
            "qk_nope_head_dim": DIMS.qk_nope_head_dim,
            "qk_rope_head_dim": rope,
            "head_dim": rank + rope,
            "v_head_dim": rank,
            "swa_v_head_dim": rank,
            "scaling": (DIMS.qk_nope_head_dim + rope) ** -0.5,
            "is_encoder_decoder": False,
            "is_multimodal": False,
            "model_is_mrope": False,
            "is_generation": True,
            "quantization": None,
            "is_hybrid_swa": False,
            "is_local_attention_model": False,
            "attention_chunk_size": None,
            "sliding_window_size": None,
            "linear_attn_registry_result": None,
        }
        hf = types.SimpleNamespace(architectures=["DeepseekV3ForCausalLM"], **DIMS.__dict__)
        hf.num_attention_heads, hf.num_key_value_heads = heads, 1
        hf.get_text_config = lambda: hf
        values["hf_config"] = values["hf_text_config"] = hf
        for name, value in values.items():
            if name not in set(omit):
                setattr(self, name, value)

    def get_num_attention_heads(self, tp_size: int) -> int:
        return self.num_attention_heads // tp_size

    def get_max_num_attention_heads(self) -> int:
        return self.num_attention_heads

    def get_num_kv_heads(self, tp_size: int, dcp_size: int = 1) -> int:
        return 1


def kit_config(heads: int) -> Any:
    """The model config of SGLang's own MLA test kit, as the kit makes it."""
    from sglang.test.kits.attention_unittest.attention_methods import mla_attention as kit

    return kit.TinyMLAModelConfig(
        num_heads=heads,
        kv_lora_rank=DIMS.kv_lora_rank,
        qk_rope_head_dim=DIMS.qk_rope_head_dim,
        hidden_size=1024,
        context_len=MAX_CONTEXT_LEN,
    )
