"""The engine side of the generated tree of `engine_tree`: its sources and benchmarks.

`ENGINE_FILES` maps each path to its text: the record's dataclass, the backend registry,
layers, builders reading layer attributes on different paths, non-attention layers, core
code filling deprecated fields and two benchmark runners. `CAM_FIELDS`: the keywords of a
complete ``CommonAttentionMetadata``, shared by the files that build one.
"""

from __future__ import annotations

CAM_FIELDS = """
                query_start_loc=qsl, query_start_loc_cpu=qsl_cpu, seq_lens=seq_lens, num_reqs=n,
                num_actual_tokens=t, max_query_len=q, max_seq_len=s, block_table_tensor=bt,
                slot_mapping=sm,"""


ENGINE_FILES: dict[str, str] = {
    "vllm/__init__.py": "",
    "vllm/v1/__init__.py": "",
    "vllm/v1/attention/__init__.py": (
        "from .backend import CommonAttentionMetadata as CommonAttentionMetadata\n"
    ),
    "vllm/v1/attention/backend.py": """
        from dataclasses import dataclass
        from torch import Tensor
        from typing_extensions import deprecated


        @dataclass
        class CommonAttentionMetadata:
            query_start_loc: Tensor; query_start_loc_cpu: Tensor; seq_lens: Tensor
            num_reqs: int; num_actual_tokens: int; max_query_len: int; max_seq_len: int
            block_table_tensor: Tensor; slot_mapping: Tensor; causal: bool = True
            seq_lens_cpu_upper_bound: Tensor | None = None
            _seq_lens_cpu: Tensor | None = None; _num_computed_tokens_cpu: Tensor | None = None

            @property
            @deprecated("use seq_lens")
            def seq_lens_cpu(self):
                return self._seq_lens_cpu

            @property
            @deprecated("removed soon")
            def num_computed_tokens_cpu(self):
                return self._num_computed_tokens_cpu


        class AttentionMetadataBuilder:
            def build(self, common_prefix_len, common_attn_metadata: CommonAttentionMetadata):
                raise NotImplementedError
    """,
    "vllm/v1/attention/backends/__init__.py": "",
    "vllm/v1/attention/backends/registry.py": """
        import enum


        class AttentionBackendEnum(enum.Enum):
            FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
            ROCM_AITER_MLA = "vllm.v1.attention.backends.mla.rocm_aiter_mla.AiterMLABackend"

            def get_class(self):
                return resolve_obj_by_qualname(self.value)
    """,
    "vllm/v1/attention/backends/utils.py": """
        def get_layers_from_vllm_config(vllm_config, layer_type, layer_names=None):
            ctx = vllm_config.compilation_config.static_forward_context
            return {k: v for k, v in ctx.items() if isinstance(v, layer_type)}
    """,
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/attention/__init__.py": (
        "from .layer import Attention, AttentionLayerBase\n"
        "from .mla_attention import MLAAttention\n"
    ),
    "vllm/model_executor/layers/attention/layer.py": """
        from abc import ABC
        from torch import nn


        class AttentionLayerBase(ABC):
            pass


        class Attention(nn.Module, AttentionLayerBase):
            def __init__(self, num_heads, head_size, prefix="", compilation_config=None):
                super().__init__()
                self.num_heads = num_heads
                self.impl = None
                compilation_config.static_forward_context[prefix] = self
    """,
    "vllm/model_executor/layers/attention/mla_attention.py": """
        from torch import nn

        from vllm.model_executor.layers.attention.layer import AttentionLayerBase
        from vllm.v1.attention.backend import AttentionMetadataBuilder, CommonAttentionMetadata


        class MLAAttention(nn.Module, AttentionLayerBase):
            def __init__(self, dims, prefill_backend):
                super().__init__()
                self.q_lora_rank = dims.q_lora_rank
                self.prefill_backend = prefill_backend


        class MLACommonMetadataBuilder(AttentionMetadataBuilder):
            def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
                layer = vllm_config.compilation_config.static_forward_context[layer_names[0]]
                self._prefill_backend = layer.prefill_backend.clone()
                {dims}
                if isinstance(layer, MLAAttention):
                    self.dcp = layer.dcp_manager
                self.sinks = getattr(layer, "sinks", None)

            def build(self, common_prefix_len, common_attn_metadata: CommonAttentionMetadata):
                seq_lens_cpu = common_attn_metadata.seq_lens_cpu_upper_bound
                assert seq_lens_cpu is not None
                return common_attn_metadata.num_reqs
    """,
    "vllm/v1/attention/backends/mla/__init__.py": "",
    "vllm/v1/attention/backends/mla/rocm_aiter_mla.py": """
        from vllm.model_executor.layers.attention.mla_attention import MLACommonMetadataBuilder


        class AiterMLABackend:
            @staticmethod
            def get_builder_cls():
                return AiterMLAMetadataBuilder


        class AiterMLAMetadataBuilder(MLACommonMetadataBuilder):
            def build(self, common_prefix_len, common_attn_metadata):
                out = super().build(common_prefix_len, common_attn_metadata)
                return out, common_attn_metadata.max_seq_len


        class AiterMLAImpl:
            def __init__(self, num_heads, kv_cache_dtype, scale):
                self.num_heads = num_heads
                self.kv_cache_dtype = kv_cache_dtype
                self.scale = scale

            def forward(self, q):
                return self._decode(q) if self.kv_cache_dtype == "fp8" else q

            def _decode(self, q):
                return q * self.scale / self.num_heads


        class AiterPrefillBackend:
            def __init__(self, workspace):
                self.workspace = workspace

            def prepare_metadata(self):
                return self.workspace

            def clone(self):
                return AiterPrefillBackend(self.workspace)
    """,
    "vllm/v1/attention/backends/flash_attn.py": """
        from vllm.model_executor.layers.attention import AttentionLayerBase
        from vllm.v1.attention.backend import AttentionMetadataBuilder
        from vllm.v1.attention.backends.utils import get_layers_from_vllm_config


        class FlashAttentionBackend:
            @staticmethod
            def get_builder_cls():
                return FlashAttentionMetadataBuilder


        class FlashAttentionMetadataBuilder(AttentionMetadataBuilder):
            def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
                layers = get_layers_from_vllm_config(vllm_config, AttentionLayerBase, layer_names)
                self.windows = [layer.impl.sliding_window for layer in layers.values()]

            def build(self, common_prefix_len, common_attn_metadata):
                if common_attn_metadata.seq_lens_cpu_upper_bound is not None:
                    return common_attn_metadata.seq_lens_cpu_upper_bound.max()
                return common_attn_metadata.seq_lens.max()
    """,
    "vllm/model_executor/layers/fused_moe/__init__.py": "",
    "vllm/model_executor/layers/fused_moe/layer.py": """
        from torch import nn


        class FusedMoE(nn.Module):
            def __init__(self, num_experts, prefix="", compilation_config=None):
                super().__init__()
                self.num_experts = num_experts
                compilation_config.static_forward_context[prefix] = self
    """,
    "vllm/v1/worker/__init__.py": "",
    "vllm/v1/worker/gpu_model_runner.py": f"""
        from vllm.v1.attention import CommonAttentionMetadata


        def build_metadata(qsl, qsl_cpu, seq_lens, n, t, q, s, bt, sm, seq_lens_cpu):
            return CommonAttentionMetadata({CAM_FIELDS}
                seq_lens_cpu_upper_bound=seq_lens_cpu,
                _seq_lens_cpu=seq_lens_cpu,
            )
    """,
    "vllm/v1/spec_decode/__init__.py": "",
    "vllm/v1/spec_decode/eagle.py": f"""
        from ..attention.backend import CommonAttentionMetadata as CAM


        def draft_metadata(qsl, qsl_cpu, seq_lens, n, t, q, s, bt, sm, upper, computed):
            return CAM({CAM_FIELDS}
                seq_lens_cpu_upper_bound=upper,
                _num_computed_tokens_cpu=computed,
            )
    """,
    "benchmarks/attention_benchmarks/mla_runner.py": f"""
        from vllm.v1.attention.backend import CommonAttentionMetadata
        from vllm.v1.attention.backends.registry import AttentionBackendEnum


        def _build_attention_metadata(qsl, qsl_cpu, seq_lens, n, t, q, s, bt, sm):
            builder_cls = AttentionBackendEnum.ROCM_AITER_MLA.get_class().get_builder_cls()
            common_attn_metadata = CommonAttentionMetadata({CAM_FIELDS}
            )
            return builder_cls, common_attn_metadata
    """,
    "benchmarks/attention_benchmarks/fa_runner.py": f"""
        from vllm.v1.attention.backend import CommonAttentionMetadata
        from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend


        def build(qsl, qsl_cpu, seq_lens, n, t, q, s, bt, sm):
            builder_cls = FlashAttentionBackend.get_builder_cls()
            return builder_cls, CommonAttentionMetadata({CAM_FIELDS}
            )
    """,
}
