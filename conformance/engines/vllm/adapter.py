"""vLLM's own config, metadata record, layers and MLA builders, made on a CPU.

`VllmEngine` holds one `VllmConfig` made from a local DeepSeek-V2-like ``config.json``
(`write_model_config`; no model hub is needed) and constructs and builds vLLM's real MLA
metadata builders (`BUILDERS`) over layers carrying what a real `MLAAttention` layer carries
for them: the five MLA dims and a real prefill backend (vLLM's CPU SDPA one). ROCM_AITER_MLA
runs over the suite's AITER stand-in (`aiter_standin`) with an fp8 cache and page size 1.
With ``speculative_tokens`` the config carries vLLM's n-gram speculative config, under
which a spec-as-decode builder (ROCM_AITER_MLA) plans multi-token decodes.
The session sets ``VLLM_TARGET_DEVICE=cpu``, ``CUDA_VISIBLE_DEVICES=`` (vLLM's Triton check
accepts zero drivers) and ``TRITON_INTERPRET=1`` (vLLM's own Triton helpers run on the CPU).
"""

from __future__ import annotations

import importlib
import json
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from conformance.engines.checks import to_engine_record
from conformance.engines.engine_backends import EngineBackend
from conformance.engines.target import VLLM
from conformance.engines.vllm.aiter_standin import AiterStandin, install_standin
from conformance.metadata.batch import BatchSpec, make_cam
from conformance.metadata.dims import DEEPSEEK_V3, MLA_DIM_NAMES

RECORD_MODULE = "vllm.v1.attention.backend"
RECORD_CLASS = "CommonAttentionMetadata"
MLA_PACKAGE = "vllm.v1.attention.backends.mla"
LAYER_NAMES = ("model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn")
DIMS = DEEPSEEK_V3.dims
MAX_MODEL_LEN = 8192
BLOCK_SIZE = 16
"""The KV cache's block size, but where a builder's entry says otherwise."""
STANDIN_ARCH, STANDIN_CUS = "gfx942", 304

BUILDERS: dict[str, EngineBackend] = {
    "TRITON_MLA": EngineBackend("triton_mla", "TritonMLABackend", page_size=BLOCK_SIZE),
    "CPU_MLA": EngineBackend("cpu_mla", "CPUMLABackend", page_size=BLOCK_SIZE),
    "FLASHINFER_MLA": EngineBackend("flashinfer_mla", "FlashInferMLABackend", page_size=BLOCK_SIZE),
    "FLASHMLA": EngineBackend("flashmla", "FlashMLABackend", page_size=BLOCK_SIZE),
    "ROCM_AITER_MLA": EngineBackend(
        "rocm_aiter_mla", "AiterMLABackend", cache_dtype="fp8", page_size=1, standin=True
    ),
}

# The builders that must build here (on any CPU) for the engine target to pass.
MUST_BUILD = VLLM.must_build


def write_model_config(directory: Path, *, heads: int = 16) -> Path:
    """A DeepSeek-V2-like ``config.json`` with the suite's MLA dims and `heads` heads."""
    config = {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "hidden_size": 1024 if 1024 % heads == 0 else 64 * heads,  # transformers: a multiple
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "num_hidden_layers": len(LAYER_NAMES),
        "intermediate_size": 2048,
        "moe_intermediate_size": 256,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "vocab_size": 1024,
        **{name: getattr(DIMS, name) for name in MLA_DIM_NAMES},
        "max_position_embeddings": MAX_MODEL_LEN,
        "torch_dtype": "bfloat16",
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def backend_class(builder: str) -> type:
    """vLLM's backend class of `builder` (its name, ``TRITON_MLA``), imported from vLLM."""
    return BUILDERS[builder].backend_class(MLA_PACKAGE)


def record_class() -> type:
    """vLLM's `CommonAttentionMetadata`, as installed."""
    return getattr(importlib.import_module(RECORD_MODULE), RECORD_CLASS)


_STANDIN: AiterStandin | None = None


def standin() -> AiterStandin:
    """The one AITER stand-in of this process (installed before vLLM's ROCm code loads)."""
    global _STANDIN
    if _STANDIN is None:
        _STANDIN = AiterStandin(arch=STANDIN_ARCH, num_cus=STANDIN_CUS, fp8=torch.float8_e4m3fnuz)
        install_standin(_STANDIN)
        properties = types.SimpleNamespace(
            gcnArchName=f"{STANDIN_ARCH}:sramecc+:xnack-",
            multi_processor_count=STANDIN_CUS,
            name="conformance stand-in",
        )
        torch.cuda.get_device_properties = lambda *args, **kwargs: properties
    return _STANDIN


def prefill_backend_class() -> type:
    """vLLM's CPU prefill backend (``CPUSDPAMLAPrefillBackend``); on a release without one
    (0.28.0), a subclass of vLLM's own ``MLAPrefillBackend`` whose kernels are not implemented:
    a metadata builder uses only the base class's ``clone`` and ``prepare_metadata``."""
    try:
        from vllm.v1.attention.backends.mla.prefill.cpu_sdpa import CPUSDPAMLAPrefillBackend
    except ModuleNotFoundError:
        from vllm.v1.attention.backends.mla.prefill.base import MLAPrefillBackend

        def not_here(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("this vLLM release has no CPU prefill backend")

        methods = {name: staticmethod(not_here) for name in MLAPrefillBackend.__abstractmethods__}
        methods["get_name"] = staticmethod(lambda: "CONFORMANCE_BUILDER_ONLY")
        return type("BuilderOnlyPrefillBackend", (MLAPrefillBackend,), methods)
    return CPUSDPAMLAPrefillBackend


def speculative_config(config: Any, tokens: int) -> Any:
    """vLLM's own n-gram `SpeculativeConfig` proposing `tokens` tokens (no draft model): a
    spec-as-decode builder then plans ``1 + tokens`` query tokens per request as a decode."""
    from vllm.config import SpeculativeConfig

    return SpeculativeConfig(
        method="ngram",
        num_speculative_tokens=tokens,
        prompt_lookup_max=2,
        prompt_lookup_min=1,
        target_model_config=config.model_config,
        target_parallel_config=config.parallel_config,
    )


class EngineLayer:
    """What vLLM's `MLAAttention` layer offers a metadata builder (dims, prefill backend)."""

    def __repr__(self) -> str:
        return f"EngineLayer({sorted(vars(self))})"


def register_architecture_standin(architecture: str = "DeepseekV2ForCausalLM") -> None:
    """Register, for `architecture`, a model class vLLM's registry inspects in this process.

    vLLM's `ModelConfig` inspects the architecture's model class in a subprocess that imports
    the model's module; on CUDA, DeepSeek-V2's (its fused-MoE layers) queries vLLM's kernels
    at import time (``torch.ops._C.cutlass_scaled_mm_supports_block_fp8``). Where those kernels
    are stood in (`conformance.engines.vllm.extensions`), that import fails, though the suite
    never builds the model: only the config, the metadata builders and the MLA decode run.
    The class registered here is a text-generation model as vLLM's interface checks see it;
    building it raises, naming the stand-in.
    """
    from torch import nn
    from vllm import ModelRegistry

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{architecture} is a stand-in: the suite never builds the model")

    def init(self: Any, *, vllm_config: Any, prefix: str = "") -> None:
        refuse(self)

    def forward(self: Any, input_ids: Any, positions: Any, *args: Any, **kwargs: Any) -> Any:
        return refuse(self)

    methods = {
        "__init__": init,
        "forward": forward,
        "embed_input_ids": refuse,
        "compute_logits": refuse,
        "__module__": __name__,
    }
    ModelRegistry.register_model(architecture, type(architecture, (nn.Module,), methods))


class VllmEngine:
    """One `VllmConfig` (model dir, heads, cache dtype, block size) and its builders."""

    def __init__(
        self,
        model_dir: Path,
        *,
        cache_dtype: str = "auto",
        block_size: int = BLOCK_SIZE,
        speculative_tokens: int = 0,
    ):
        from vllm.config import CacheConfig, ModelConfig, VllmConfig

        model = ModelConfig(
            model=str(model_dir),
            skip_tokenizer_init=True,
            dtype="bfloat16",
            max_model_len=MAX_MODEL_LEN,
        )
        cache = CacheConfig(block_size=block_size, cache_dtype=cache_dtype)
        self.config = VllmConfig(model_config=model, cache_config=cache)
        if speculative_tokens:
            self.config.speculative_config = speculative_config(self.config, speculative_tokens)
        self.block_size = block_size
        self.cache_dtype = cache_dtype
        self.heads = model.get_num_attention_heads(self.config.parallel_config)
        self.record_cls = record_class()

    def kv_cache_spec(self) -> Any:
        from vllm.v1.kv_cache_interface import MLAAttentionSpec

        fp8 = self.cache_dtype != "auto"
        return MLAAttentionSpec(
            block_size=self.block_size,
            num_kv_heads=1,
            head_size=DIMS.cache_width,
            dtype=torch.uint8 if fp8 else torch.bfloat16,
            cache_dtype_str=self.cache_dtype if fp8 else None,
        )

    def make_layer(self, *, omit: Iterable[str] = ()) -> EngineLayer:
        """A layer with the five dims and a real prefill backend, less `omit`."""
        layer = EngineLayer()
        values: dict[str, Any] = {name: getattr(DIMS, name) for name in MLA_DIM_NAMES}
        values["prefill_backend"] = prefill_backend_class()(
            num_heads=self.heads,
            scale=DIMS.qk_head_dim**-0.5,
            kv_lora_rank=DIMS.kv_lora_rank,
            qk_nope_head_dim=DIMS.qk_nope_head_dim,
            qk_rope_head_dim=DIMS.qk_rope_head_dim,
            v_head_dim=DIMS.v_head_dim,
            vllm_config=self.config,
        )
        for name, value in values.items():
            if name not in set(omit):
                setattr(layer, name, value)
        return layer

    def layers(self, *, omit: Iterable[str] = ()) -> dict[str, Any]:
        """Every layer of the model, each without `omit`."""
        return {name: self.make_layer(omit=omit) for name in LAYER_NAMES}

    def construct(
        self, builder: str, layers: Mapping[str, Any], *, device: torch.device | None = None
    ) -> Any:
        """vLLM's real metadata builder of `builder` over `layers` (on the CPU by default)."""
        from vllm.config import set_current_vllm_config

        if BUILDERS[builder].standin:
            standin()
        context = self.config.compilation_config.static_forward_context
        context.clear()
        context.update(layers)
        with set_current_vllm_config(self.config):
            return backend_class(builder).get_builder_cls()(
                self.kv_cache_spec(), list(layers), self.config, device or torch.device("cpu")
            )

    def build(self, builder: Any, record: Any) -> Any:
        """``builder.build(0, record)`` under this engine's config."""
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.config):
            return builder.build(0, record)

    def record(self, spec: BatchSpec, *, omit: Iterable[str] = ()) -> Any:
        """vLLM's own record of `spec`, from the suite's batch factory, less `omit`."""
        return self.record_of(make_cam(spec, block_size=self.block_size), omit=omit)

    def record_of(self, cam: Any, *, omit: Iterable[str] = ()) -> Any:
        """vLLM's own record with the values of the suite's record `cam`, less `omit`."""
        return to_engine_record(cam, self.record_cls, omit=omit)
