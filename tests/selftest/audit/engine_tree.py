"""A generated source tree shaped like an inference engine, with its true findings.

The tree holds the record's dataclass, builders reading layer attributes on different paths
(direct indexing, a type-filtered lookup, guarded reads), a backend registry enum, tests
with SimpleNamespace, dict, ad-hoc-class and ``object.__new__`` stubs, impl and
prefill-backend stand-ins, non-attention layers in the context, a class-name collision
across files, a deliberate ``None`` and core code filling deprecated fields. `EXPECTED` is
every finding a correct audit reports on it, and nothing else.
"""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

# The sibling is read by path: the selftests are no package (conftest.py loads this one so).
_CORE = runpy.run_path(str(Path(__file__).with_name("engine_tree_core.py")))
CAM_FIELDS: str = _CORE["CAM_FIELDS"]
ENGINE_FILES: dict[str, str] = _CORE["ENGINE_FILES"]

FILES: dict[str, str] = {
    **ENGINE_FILES,
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
