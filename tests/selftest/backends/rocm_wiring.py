"""Helpers of the ROCm adapter's wiring selftests (a helper, not a test module; load it with
runpy): build decode metadata with the adapter's builder over the AITER stand-in, make
decode inputs, replay the reference plan, and assert AITER's call contract."""

from __future__ import annotations

from typing import Any

import torch

from backends.base import BuilderConfig, KVCacheSpec, MLAMetadata
from backends.rocm.backend import RocmAiterBackend
from backends.rocm.planner import AiterWorkPlan
from conformance.metadata.batch import BatchSpec, make_cam
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.persistent.planner import plan_persistent_decode
from conformance.stubs.protocol import MLAAttentionLayer
from kernels.plan_exec import execute_plan

LAYER = "model.layers.0.self_attn.attn"
SM_SCALE = 576**-0.5

FOUR = BatchSpec((32, 40, 17, 100), (1, 1, 1, 1))
THREE = BatchSpec((300, 40, 129), (1, 1, 1))
TAIL = BatchSpec((577, 40), (4, 4))  # docs/planner.md worked example 2: the tail rule


def fp8_of(backend: RocmAiterBackend) -> torch.dtype:
    return backend.runtime().api.fp8


def build(
    backend: RocmAiterBackend,
    spec: BatchSpec,
    *,
    block_size: int = 1,
    num_heads: int = 16,
    dtype: str = "bf16",
    max_split_per_batch: int = -1,
) -> MLAMetadata:
    """Build the decode metadata of `spec` with the backend's builder."""
    threshold = max(spec.query_lens)
    data = fp8_of(backend) if dtype == "fp8" else torch.bfloat16
    config = BuilderConfig(
        model=DEEPSEEK_R1,
        num_heads=num_heads,
        kv_cache=KVCacheSpec(block_size=block_size, dtype=data),
        q_dtype=data,
        max_num_seqs=16,
        max_model_len=1024,
        decode_threshold=threshold,
        device=str(backend.device),
        max_split_per_batch=max_split_per_batch,
    )
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=num_heads)
    builder = backend.make_builder(config, [LAYER], {LAYER: layer})
    cam = make_cam(spec, block_size=block_size, decode_threshold=threshold)
    return builder.build(cam)


def decode_inputs(
    meta: MLAMetadata, spec: BatchSpec, *, num_heads: int, block_size: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 q ``[T, H, 576]`` and a bf16 cache over the batch's blocks."""
    gen = torch.Generator().manual_seed(seed)
    blocks = sum(-(-s // block_size) for s in spec.seq_lens) + 1
    q = torch.randn((meta.num_decode_tokens, num_heads, 576), generator=gen).to(torch.bfloat16)
    cache = torch.randn((blocks, block_size, 576), generator=gen).to(torch.bfloat16)
    return q, cache


def reference_plan_output(meta: MLAMetadata, q, cache, **scales: float):  # -> PlanOutput
    """The reference planner's plan for the same call, executed by the reference executor."""
    d = meta.decode
    assert d is not None
    plan = plan_persistent_decode(**d.planner_call)
    return execute_plan(
        plan,
        q,
        cache,
        kv_indptr=d.kv_indptr,
        kv_indices=d.kv_indices,
        kv_last_page_lens=d.kv_last_page_lens,
        page_size=d.page_size,
        sm_scale=SM_SCALE,
        causal=True,
        **scales,
    )


def assert_metadata_call_contract(standin: Any, meta: MLAMetadata) -> None:
    """The last ``get_mla_metadata_info_v1``/``get_mla_metadata_v1`` calls, argument by argument."""
    __tracebackhide__ = True
    decode = meta.decode
    assert decode is not None and isinstance(decode.plan, AiterWorkPlan)
    plan, call = decode.plan, decode.planner_call
    info = standin.calls_to("get_mla_metadata_info_v1")[-1]
    batch = call["kv_indptr"].numel() - 1
    expected_info = (
        batch,
        call["max_seqlen_qo"],
        call["num_heads_q"],
        call["q_dtype"],
        call["kv_dtype"],
    )
    assert info.args == expected_info, f"info args {info.args}, expected {expected_info}"
    assert info.kwargs == {
        "is_sparse": False,
        "fast_mode": True,
        "intra_batch_mode": False,
        "max_split_per_batch": call["max_split_per_batch"],
    }, f"info kwargs {info.kwargs}"

    meta_call = standin.calls_to("get_mla_metadata_v1")[-1]
    args, kwargs = meta_call.args, meta_call.kwargs
    assert len(args) == 12, f"expected 12 positional arguments, found {len(args)}"
    for index, name in enumerate(("qo_indptr", "kv_indptr", "kv_last_page_lens")):
        assert args[index].dtype == torch.int32, f"argument {index} ({name}): {args[index].dtype}"
        assert torch.equal(args[index].cpu(), call[name].to(torch.int32)), f"argument {name}"
    assert args[3:6] == (call["num_heads_q"], 1, call["causal"]), f"heads/causal {args[3:6]}"
    buffers = ("work_metadata_ptrs", "work_info_set", "work_indptr", "reduce_indptr")
    buffers += ("reduce_final_map", "reduce_partial_map")
    for offset, name in enumerate(buffers):
        assert args[6 + offset] is getattr(plan, name), (
            f"positional argument {6 + offset} must be {name}"
        )
    expected = {
        "page_size": call["page_size"],
        "kv_granularity": max(call["page_size"], 16),
        "max_seqlen_qo": call["max_seqlen_qo"],
        "uni_seqlen_qo": call["uni_seqlen_qo"],
        "fast_mode": True,
        "max_split_per_batch": call["max_split_per_batch"],
        "intra_batch_mode": False,
        "dtype_q_nope": call["q_dtype"],
        "dtype_q_rope": call["q_dtype"],
        "dtype_kv_nope": call["kv_dtype"],
        "dtype_kv_rope": call["kv_dtype"],
    }
    for name, value in expected.items():
        assert name in kwargs, f"get_mla_metadata_v1 was called without {name}"
        assert kwargs[name] == value, f"{name}={kwargs[name]!r}, expected {value!r}"
    assert set(kwargs) == set(expected), f"unexpected keywords {set(kwargs) - set(expected)}"


def assert_native_plan_conforms(backend: RocmAiterBackend, meta: MLAMetadata) -> None:
    """Family C's native plan check: AITER's buffers equal the reference planner's."""
    __tracebackhide__ = True
    assert meta.decode is not None
    problems = backend.native_plan_check(meta.decode)
    assert problems == [], "AITER's plan differs from the reference:\n" + "\n".join(problems or [])


def assert_persistent_decode(standin: Any) -> None:
    """Every decode took AITER's persistent path."""
    __tracebackhide__ = True
    assert standin.decode_paths, "no decode ran"
    assert set(standin.decode_paths) == {"persistent"}, f"decode paths {standin.decode_paths}"
