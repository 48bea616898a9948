"""A generated source tree shaped like an inference engine, with its true findings.

The tree holds the record's dataclass, builders reading layer attributes on different paths
(direct indexing, a type-filtered lookup, guarded reads), a backend registry enum, tests
with SimpleNamespace, dict, ad-hoc-class and ``object.__new__`` stubs, impl and
prefill-backend stand-ins, non-attention layers in the context, a class-name collision
across files, a deliberate ``None`` and core code filling deprecated fields. `EXPECTED` is
every finding a correct audit reports on it, and nothing else.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

CAM_FIELDS = """
                query_start_loc=qsl, query_start_loc_cpu=qsl_cpu, seq_lens=seq_lens, num_reqs=n,
                num_actual_tokens=t, max_query_len=q, max_seq_len=s, block_table_tensor=bt,
                slot_mapping=sm,"""

FILES: dict[str, str] = {
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
    "tests/kernels/attention/test_rocm_aiter_mla_decode_metadata.py": """
        import types

        import torch


        def _build_decode_metadata(vllm_config, spec, mla_dims):
            from vllm.v1.attention.backends.registry import AttentionBackendEnum

            builder_cls = AttentionBackendEnum.ROCM_AITER_MLA.get_class().get_builder_cls()
            layer_name = "placeholder"
            vllm_config.compilation_config.static_forward_context[layer_name] = (
                types.SimpleNamespace(
                    prefill_backend=torch.empty((1,)),{fixed}
                )
            )
            return builder_cls(spec, [layer_name], vllm_config, "cuda")
    """,
    "tests/kernels/attention/test_rocm_aiter_mla_causal_mask.py": """
        from types import SimpleNamespace as NS

        import torch

        from vllm.v1.attention.backends.registry import AttentionBackendEnum


        def _builder(vllm_config, spec, d):
            ctx = vllm_config.compilation_config.static_forward_context
            ctx["placeholder"] = NS(
                prefill_backend=torch.empty((1,)), q_lora_rank=d.q, kv_lora_rank=d.kv,
                qk_nope_head_dim=d.nope, qk_rope_head_dim=d.rope, v_head_dim=d.v,
            )
            cls = AttentionBackendEnum.ROCM_AITER_MLA.get_class().get_builder_cls()
            return cls(spec, ["placeholder"], vllm_config, "cuda")
    """,
    "tests/v1/attention/test_mla_backends.py": """
        from vllm.model_executor.layers.attention import AttentionLayerBase
        from vllm.model_executor.layers.attention.mla_attention import MLACommonMetadataBuilder


        class MockMLALayer(AttentionLayerBase):
            def __init__(self, d, pb):
                self.prefill_backend = pb
                self.q_lora_rank, self.kv_lora_rank = d.q, d.kv
                self.qk_nope_head_dim = d.nope
                self.qk_rope_head_dim = d.rope
                self.v_head_dim = d.v


        def test_builds(vllm_config, spec, d, pb):
            vllm_config.compilation_config.static_forward_context = {"l0": MockMLALayer(d, pb)}
            MLACommonMetadataBuilder(spec, ["l0"], vllm_config, "cpu")


        def test_dict_stub(vllm_config, spec, d):
            stub = {"prefill_backend": None, "q_lora_rank": 1, "kv_lora_rank": 2,
                    "qk_nope_head_dim": 3, "qk_rope_head_dim": 4}
            vllm_config.compilation_config.static_forward_context.update({"l1": stub})
            MLACommonMetadataBuilder(spec, ["l1"], vllm_config, "cpu")
    """,
    "tests/v1/attention/test_flash_attn_layers.py": """
        from types import SimpleNamespace

        from vllm.v1.attention.backends.flash_attn import FlashAttentionMetadataBuilder


        def test_windows(vllm_config, spec):
            vllm_config.compilation_config.static_forward_context["l"] = SimpleNamespace(impl=None)
            FlashAttentionMetadataBuilder(spec, ["l"], vllm_config, "cpu")
    """,
    "tests/v1/attention/test_real_layers.py": """
        from vllm.model_executor.layers.attention import Attention
        from vllm.model_executor.layers.attention.mla_attention import MLACommonMetadataBuilder
        from vllm.model_executor.layers.fused_moe.layer import FusedMoE


        def test_real_layer(vllm_config, spec):
            ctx = vllm_config.compilation_config.static_forward_context
            ctx["attn"] = Attention(4, 64, prefix="attn", compilation_config=None)
            ctx["moe"] = FusedMoE(8)
            ctx["moe2"] = object.__new__(FusedMoE)
            MLACommonMetadataBuilder(spec, ["attn"], vllm_config, "cpu")
    """,
    "tests/compile/test_fusion_attn.py": """
        from torch import nn


        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 1.0


        def test_fusion(vllm_config):
            vllm_config.compilation_config.static_forward_context["a"] = Attention()
    """,
    "tests/v1/attention/test_impl_standins.py": """
        from vllm.v1.attention.backends.mla.rocm_aiter_mla import (
            AiterMLAImpl,
            AiterPrefillBackend,
        )


        def test_fp8_impl(q):
            impl = object.__new__(AiterMLAImpl)
            impl.num_heads = 16
            return impl.forward(q)


        def test_complete_impl(q):
            impl = object.__new__(AiterMLAImpl)
            impl.num_heads, impl.scale = 16, 0.5
            impl.kv_cache_dtype = "fp8"
            return impl.forward(q)


        def test_prefill_backend():
            backend = object.__new__(AiterPrefillBackend)
            backend.workspace = []
            return backend.prepare_metadata()


        def test_unused_impl():
            return object.__new__(AiterMLAImpl)
    """,
    "tests/v1/attention/test_upper_bound_none.py": f"""
        from vllm.v1.attention.backend import CommonAttentionMetadata
        from vllm.v1.attention.backends.mla.rocm_aiter_mla import AiterMLAMetadataBuilder


        def test_rejects_missing_upper_bound(qsl, qsl_cpu, seq_lens, n, t, q, s, bt, sm):
            cam = CommonAttentionMetadata({CAM_FIELDS}
                seq_lens_cpu_upper_bound=None,
            )
            return AiterMLAMetadataBuilder, cam
    """,
}

DIMS_NEW = (
    "self.q_lora_rank = layer.q_lora_rank\n"
    "                self.kv_lora_rank = layer.kv_lora_rank\n"
    "                self.qk_nope_head_dim = layer.qk_nope_head_dim\n"
    "                self.qk_rope_head_dim = layer.qk_rope_head_dim\n"
    "                self.v_head_dim = layer.v_head_dim"
)
DIMS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
SEED_52139 = "tests/kernels/attention/test_rocm_aiter_mla_decode_metadata.py"
SEED_40844 = "benchmarks/attention_benchmarks/mla_runner.py"

EXPECTED: set[tuple[str, str, tuple[str, ...]]] = {
    (
        SEED_52139,
        "STUB001",
        ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
    ),
    (SEED_52139, "STUB003", ("AttentionLayerBase",)),
    (
        "tests/kernels/attention/test_rocm_aiter_mla_causal_mask.py",
        "STUB003",
        ("AttentionLayerBase",),
    ),
    ("tests/v1/attention/test_mla_backends.py", "STUB001", ("v_head_dim",)),
    ("tests/v1/attention/test_mla_backends.py", "STUB003", ("AttentionLayerBase",)),
    ("tests/v1/attention/test_flash_attn_layers.py", "STUB003", ("AttentionLayerBase",)),
    ("tests/v1/attention/test_impl_standins.py", "STUB004", ("kv_cache_dtype",)),
    (SEED_40844, "CAM001", ("seq_lens_cpu_upper_bound",)),
    ("tests/v1/attention/test_upper_bound_none.py", "CAM006", ("seq_lens_cpu_upper_bound",)),
    ("vllm/v1/worker/gpu_model_runner.py", "CAM002", ("_seq_lens_cpu",)),
    ("vllm/v1/spec_decode/eagle.py", "CAM002", ("_num_computed_tokens_cpu",)),
}
"""(file, code, names) of every true finding on the tree `write_engine_tree` writes."""

EXPECTED_OLD = {e for e in EXPECTED if e[1] not in ("STUB001",)} | {
    ("tests/v1/attention/test_mla_backends.py", "STUB003", ("AttentionLayerBase",)),
}
"""The same tree when the MLA builder reads no MLA dimension (before #51255)."""


def write_engine_tree(root: Path, *, dims: bool = True, fixed: bool = False) -> Path:
    """Write the tree under `root`; `dims`: the builder reads the five MLA dims (after
    #51255); `fixed`: both seed regressions fixed."""
    for relpath, text in FILES.items():
        body = textwrap.dedent(text.replace("{dims}", DIMS_NEW if dims else "pass")).lstrip("\n")
        extra = "".join(f"\n                    {d}=mla_dims.{d}," for d in DIMS) if fixed else ""
        body = body.replace("{fixed}", extra)
        if fixed and relpath == SEED_40844:
            body = body.replace(
                "slot_mapping=sm,", "slot_mapping=sm, seq_lens_cpu_upper_bound=seq_lens,"
            )
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return root
