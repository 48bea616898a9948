"""The ROCm adapter's wiring, run against the AITER stand-in (fake_aiter.py) on the CPU.

What is proved here: the adapter calls AITER's three functions with the right arguments in
the right positions (every dtype explicit, ``max_seqlen_qo``/``uni_seqlen_qo`` always,
``work_info_set`` before ``work_indptr``), reads AITER's buffers back into a `WorkPlan` that
matches the reference planner, keeps the pointer table honest, converts layouts and scales
for ``mla_decode_fwd`` and its results back. Negative controls patch the adapter to drop a
dtype, swap two buffers, omit ``max_seqlen_qo`` or let AITER's batch gate bypass the
persistent kernel, and check that the suite's checks reject each one.

What is not proved here: that AMD AITER behaves like the stand-in (the hardware run does
that, through family C's native plan check and the decode families). Nothing here writes
JUnit: stand-in results are never a rocm conformance result.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.base import BuilderConfig, KVCacheSpec, MLAMetadata
from backends.rocm import decode as rocm_decode
from backends.rocm import planner as rocm_planner
from backends.rocm import probe as rocm_probe
from backends.rocm.backend import RocmAiterBackend
from backends.rocm.planner import AiterWorkPlan
from conformance.errors import BackendUnavailable, PlanError
from conformance.metadata.batch import BatchSpec, make_cam
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.numerics.fp8 import fp8_dtype_for_arch, quantize_per_tensor
from conformance.persistent.aiter_check import aiter_plan_matches_reference
from conformance.persistent.planner import plan_persistent_decode
from conformance.stubs.protocol import MLAAttentionLayer
from kernels.plan_exec import execute_plan
from kernels.reference import mla_decode_reference

REPO = Path(__file__).resolve().parents[3]
LAYER = "model.layers.0.self_attn.attn"
SM_SCALE = 576**-0.5


fake_aiter = sys.modules["mla_selftest_fake_aiter"]  # registered by conftest.py


@pytest.fixture(autouse=True)
def _never_into_reports(request: pytest.FixtureRequest) -> None:
    xml = request.config.getoption("xmlpath", None)
    if xml and Path(xml).resolve().is_relative_to(REPO / "reports"):
        pytest.skip("stand-in results never go into reports/: they are not a rocm run")


@pytest.fixture
def rocm(monkeypatch: pytest.MonkeyPatch):  # -> make(arch, num_cus, **standin)
    """``(arch, num_cus) -> (backend, standin)`` over an installed stand-in."""

    def make(arch: str = "gfx942", num_cus: int = 8, **standin: Any):
        return fake_aiter.install_standin_backend(
            monkeypatch, arch=arch, num_cus=num_cus, **standin
        )

    return make


# ---------------------------------------------------------------------------------------
# Helpers


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


# ---------------------------------------------------------------------------------------
# Planning

FOUR = BatchSpec((32, 40, 17, 100), (1, 1, 1, 1))
THREE = BatchSpec((300, 40, 129), (1, 1, 1))
TAIL = BatchSpec((577, 40), (4, 4))  # research note §2.3 worked example 2: the tail rule

PLAN_CASES = [
    # (id, arch, num_cus, spec, block_size, heads, dtype, max_split_per_batch)
    ("gfx942-small-bf16", "gfx942", 8, FOUR, 1, 16, "bf16", -1),
    ("gfx942-mtp4-tail", "gfx942", 4, TAIL, 1, 16, "bf16", -1),
    ("gfx942-128h-fp8-page16", "gfx942", 8, THREE, 16, 128, "fp8", -1),
    ("gfx942-32h-fold-mtp2", "gfx942", 8, BatchSpec((64, 300, 17), (2, 2, 2)), 1, 32, "bf16", -1),
    ("gfx942-padded-mtp", "gfx942", 8, BatchSpec((20, 30, 0), (2, 2, 0)), 1, 16, "bf16", -1),
    ("gfx942-msb2", "gfx942", 80, BatchSpec((2000, 30), (1, 1)), 1, 16, "bf16", 2),
    ("gfx950-48h-fp8-fold", "gfx950", 8, BatchSpec((200, 33), (1, 1)), 1, 48, "fp8", -1),
    ("gfx950-64h-bf16-page64", "gfx950", 16, BatchSpec((700, 65), (2, 2)), 64, 64, "bf16", -1),
]


@pytest.mark.parametrize(
    ("arch", "num_cus", "spec", "block_size", "heads", "dtype", "msb"),
    [pytest.param(*case[1:], id=case[0]) for case in PLAN_CASES],
)
def test_aiter_plan_matches_the_reference_and_the_call_contract(
    rocm, arch, num_cus, spec, block_size, heads, dtype, msb
) -> None:
    backend, standin = rocm(arch, num_cus)
    meta = build(
        backend, spec, block_size=block_size, num_heads=heads, dtype=dtype, max_split_per_batch=msb
    )
    assert meta.decode is not None and isinstance(meta.decode.plan, AiterWorkPlan)
    assert meta.decode.planner_call["arch"] == arch
    assert meta.decode.planner_call["num_cus"] == num_cus
    assert_metadata_call_contract(standin, meta)
    assert_native_plan_conforms(backend, meta)
    assert standin.out_of_bounds == []


def test_the_planner_takes_the_reference_planners_arguments(rocm) -> None:
    reference = inspect.signature(plan_persistent_decode).parameters
    ours = inspect.signature(rocm_planner.AiterPlanner.__call__).parameters
    assert [(p.name, p.kind) for p in list(ours.values())[1:]] == [
        (p.name, p.kind) for p in reference.values()
    ]


def test_a_spy_on_the_builders_planner_sees_the_planner_call(rocm) -> None:
    backend, _ = rocm()
    config = BuilderConfig(num_heads=16, device="cpu", max_num_seqs=16, max_model_len=1024)
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=16)
    builder = backend.make_builder(config, [LAYER], {LAYER: layer})
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    real = builder.planner

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append((args, kwargs))
        return real(*args, **kwargs)

    builder.planner = spy
    meta = builder.build(make_cam(BatchSpec((90, 20), (1, 1)), block_size=1))
    assert meta.decode is not None
    assert seen == [((), meta.decode.planner_call)]
    replay = plan_persistent_decode(**seen[0][1])
    assert aiter_plan_matches_reference(meta.decode.plan, seen[0][1]) == []
    assert replay.num_works == meta.decode.plan.num_works


def test_the_plan_records_the_raw_aiter_calls(rocm) -> None:
    backend, standin = rocm()
    meta = build(backend, BatchSpec((90, 20), (1, 1)))
    plan = meta.decode.plan
    recorded = plan.aiter_calls["get_mla_metadata_v1"]
    assert recorded["args"] == standin.calls_to("get_mla_metadata_v1")[-1].args
    assert recorded["kwargs"] == standin.calls_to("get_mla_metadata_v1")[-1].kwargs
    assert plan.params["planner"].startswith("aiter.get_mla_metadata_v1 (aiter 0.0.0+selftest")


def test_an_arch_or_cu_count_other_than_the_devices_is_refused(rocm) -> None:
    backend, _ = rocm("gfx942", 8)
    spec = BatchSpec((90, 20), (1, 1))
    config = BuilderConfig(num_heads=16, device="cpu", max_num_seqs=16, max_model_len=1024)
    layer = {LAYER: MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=16)}
    cam = make_cam(spec, block_size=1)
    with pytest.raises(PlanError, match=r"arch: AITER plans for the device it runs on \(gfx942\)"):
        backend.make_builder(replace(config, arch="gfx950"), [LAYER], layer).build(cam)
    with pytest.raises(PlanError, match="num_cus: AITER plans for the device's 8 CUs"):
        backend.make_builder(replace(config, num_cus=304), [LAYER], layer).build(cam)


@pytest.mark.parametrize(
    ("q_dtype", "kv_dtype", "match"),
    [
        (torch.float8_e4m3fn, torch.float8_e4m3fn, "is not AITER's fp8 on gfx942"),
        (torch.float16, torch.float16, "takes bfloat16 or torch.float8_e4m3fnuz"),
        (torch.float8_e4m3fnuz, torch.bfloat16, "fp8 q with torch.bfloat16 kv"),
    ],
)
def test_dtypes_aiter_cannot_plan_are_refused_by_name(rocm, q_dtype, kv_dtype, match) -> None:
    backend, _ = rocm("gfx942")
    config = BuilderConfig(
        num_heads=16,
        q_dtype=q_dtype,
        kv_cache=KVCacheSpec(block_size=1, dtype=kv_dtype),
        device="cpu",
        max_num_seqs=16,
        max_model_len=1024,
    )
    builder = backend.make_builder(
        config, [LAYER], {LAYER: MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=16)}
    )
    with pytest.raises(PlanError, match=match):
        builder.build(make_cam(BatchSpec((90, 20), (1, 1)), block_size=1))


# ---------------------------------------------------------------------------------------
# Decoding

DECODE_CASES = [
    # (id, arch, spec, block_size, heads)
    ("gfx942-16h", "gfx942", BatchSpec((90, 20, 47), (1, 1, 1)), 1, 16),
    ("gfx942-32h-fold-mtp2", "gfx942", BatchSpec((64, 30), (2, 2)), 16, 32),
    ("gfx950-64h-mtp3-qo-split", "gfx950", BatchSpec((50, 60), (3, 3)), 1, 64),
]


@pytest.mark.parametrize(
    ("arch", "spec", "block_size", "heads"),
    [pytest.param(*case[1:], id=case[0]) for case in DECODE_CASES],
)
def test_bf16_decode_matches_the_reference(rocm, arch, spec, block_size, heads) -> None:
    backend, standin = rocm(arch, 4)
    meta = build(backend, spec, block_size=block_size, num_heads=heads)
    q, cache = decode_inputs(meta, spec, num_heads=heads, block_size=block_size)
    out, lse = backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    assert_persistent_decode(standin)
    assert out.dtype == torch.bfloat16 and out.shape == (q.shape[0], heads, 512)
    assert lse.dtype == torch.float32 and lse.shape == (q.shape[0], heads)
    assert not out.isnan().any() and not lse.isnan().any()
    expected = reference_plan_output(meta, q, cache)
    torch.testing.assert_close(out, expected.out.to(torch.bfloat16), rtol=0, atol=0)
    torch.testing.assert_close(lse, expected.lse, rtol=0, atol=0)
    d = meta.decode
    ref_out, ref_lse = mla_decode_reference(
        q,
        cache,
        query_start_loc=d.query_start_loc_cpu,
        seq_lens=d.seq_lens,
        block_table=d.block_table,
        sm_scale=SM_SCALE,
    )
    torch.testing.assert_close(out.double(), ref_out, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_fp8_decode_passes_both_scales_as_fp32_tensors(rocm) -> None:
    backend, standin = rocm("gfx942", 4)
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec, num_heads=128, dtype="fp8")
    q16, cache16 = decode_inputs(meta, spec, num_heads=128, block_size=1)
    fp8 = fp8_of(backend)
    q, q_scale = quantize_per_tensor(q16, fp8)
    cache, kv_scale = quantize_per_tensor(cache16, fp8)
    out, lse = backend.decode(
        q, cache, meta.decode, sm_scale=SM_SCALE, q_scale=q_scale, kv_scale=kv_scale
    )
    call = standin.calls_to("mla_decode_fwd")[-1]
    for name, value in (("q_scale", q_scale), ("kv_scale", kv_scale)):
        tensor = call.kwargs[name]
        assert tensor.dtype == torch.float32 and tensor.shape == (1,), name
        assert float(tensor) == value, name
    assert call.kwargs["sm_scale"] == SM_SCALE
    expected = reference_plan_output(meta, q, cache, q_scale=q_scale, kv_scale=kv_scale)
    torch.testing.assert_close(out, expected.out.to(torch.bfloat16), rtol=0, atol=0)
    torch.testing.assert_close(lse, expected.lse, rtol=0, atol=0)


def test_bf16_decode_folds_the_q_scale_into_sm_scale(rocm) -> None:
    backend, standin = rocm()
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec)
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=1)
    backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE, q_scale=0.5)
    kwargs = standin.calls_to("mla_decode_fwd")[-1].kwargs
    assert kwargs["q_scale"] is None and kwargs["kv_scale"] is None
    assert kwargs["sm_scale"] == SM_SCALE * 0.5
    with pytest.raises(ValueError, match="AITER applies a kv scale only to an fp8 cache"):
        backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE, kv_scale=2.0)


def test_decode_call_layout(rocm) -> None:
    backend, standin = rocm()
    spec = BatchSpec((90, 20), (2, 2))
    meta = build(backend, spec, block_size=16)
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=16)
    backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    call = standin.calls_to("mla_decode_fwd")[-1]
    assert call.args[1].shape == (cache.shape[0], 16, 1, 576), "kv_buffer layout"
    assert call.args[7] == 2, "max_seqlen_q"
    plan = meta.decode.plan
    assert call.kwargs["work_meta_data"] is plan.work_metadata_ptrs
    for name in ("work_indptr", "work_info_set", "reduce_indptr"):
        assert call.kwargs[name] is getattr(plan, name), name
    assert call.kwargs["num_kv_splits"] is None and call.kwargs["return_lse"] is True
    assert call.kwargs["page_size"] == 16 and call.kwargs["nhead_kv"] == 1


def test_a_plan_from_elsewhere_gets_its_own_pointer_table(rocm) -> None:
    backend, standin = rocm("gfx942", 8)
    spec = BatchSpec((900, 20), (1, 1))
    meta = build(backend, spec)
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=1)
    expected, _ = backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    assert standin.calls_to("mla_decode_fwd")[-1].kwargs["num_kv_splits"] is None
    for num_cus in (4, 16):  # a reference plan for fewer and for more programs than CUs
        call = {**meta.decode.planner_call, "num_cus": num_cus}
        foreign = replace(meta.decode, plan=plan_persistent_decode(**call))
        out, _ = backend.decode(q, cache, foreign, sm_scale=SM_SCALE)
        torch.testing.assert_close(out, expected)  # another split: fp32 merge order differs
        kwargs = standin.calls_to("mla_decode_fwd")[-1].kwargs
        assert kwargs["num_kv_splits"] == max(8, num_cus), "reduce sized for the plan's groups"
        assert kwargs["work_indptr"].numel() == num_cus + 1
    assert_persistent_decode(standin)


def test_a_plan_for_another_arch_is_refused(rocm) -> None:
    backend, _ = rocm("gfx942", 8)
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec)
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=1)
    other = plan_persistent_decode(**{**meta.decode.planner_call, "arch": "gfx950"})
    with pytest.raises(PlanError, match="planned for gfx950, but the kernel runs on gfx942"):
        backend.decode(q, cache, replace(meta.decode, plan=other), sm_scale=SM_SCALE)


def test_rows_the_kernel_does_not_write_stay_nan(rocm, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, standin = rocm()
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec)
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=1)
    real = standin.mla_decode_fwd

    @functools.wraps(real)
    def lazy_kernel(q, kv_buffer, o, *args: Any, **kwargs: Any) -> Any:
        logits, lse = real(q, kv_buffer, o, *args, **kwargs)
        o[1] = math.nan  # as if the kernel skipped row 1: o keeps its NaN prefill
        return logits, lse

    monkeypatch.setattr(standin.modules["aiter.mla"], "mla_decode_fwd", lazy_kernel)
    backend = RocmAiterBackend()
    out, _ = backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    assert out[1].isnan().all() and not out[0].isnan().any()


# ---------------------------------------------------------------------------------------
# Negative controls: a misbehaving adapter is caught


def assert_dtypes_dropped(standin: Any) -> None:
    """The last ``get_mla_metadata_v1`` call passed no dtype at all (what the patch does)."""
    __tracebackhide__ = True
    kwargs = standin.calls_to("get_mla_metadata_v1")[-1].kwargs
    assert not any(name.startswith("dtype_") for name in kwargs), kwargs


@pytest.mark.parametrize(
    ("arch", "heads", "plan_differs"),
    [
        pytest.param("gfx950", 48, True, id="gfx950-fp8-48h"),
        # vLLM #46997's own case: on gfx950 today bf16 is native too, so the plan comes out
        # the same; only the call-contract check sees the dropped dtype.
        pytest.param("gfx950", 32, False, id="gfx950-fp8-32h"),
    ],
)
def test_a_dropped_dtype_is_caught(
    rocm, monkeypatch: pytest.MonkeyPatch, arch, heads, plan_differs
) -> None:
    backend, standin = rocm(arch, 8)
    monkeypatch.setattr(rocm_planner, "dtype_kwargs", lambda *a, **k: {})
    meta = build(backend, THREE, num_heads=heads, dtype="fp8")
    assert_dtypes_dropped(standin)
    with pytest.raises(AssertionError, match="called without dtype_q_nope"):
        assert_metadata_call_contract(standin, meta)
    problems = backend.native_plan_check(meta.decode)
    assert bool(problems) is plan_differs, problems
    if plan_differs:
        with pytest.raises(AssertionError, match="AITER's plan differs"):
            assert_native_plan_conforms(backend, meta)


@pytest.mark.parametrize("heads", [128, 64])
def test_a_dropped_dtype_that_overflows_work_info_set_fails_the_build(
    rocm, monkeypatch, heads
) -> None:
    """gfx942 fp8 64/128 heads are native; planned as bf16 they fold into more works than
    the (fp8-sized) work_info_set holds: memory corruption on hardware, a read-back error here."""
    backend, standin = rocm("gfx942", 8)
    monkeypatch.setattr(rocm_planner, "dtype_kwargs", lambda *a, **k: {})
    with pytest.raises(PlanError, match=r"work_indptr: AITER wrote \[0, \.\.\., \d+\], expected"):
        build(backend, THREE, num_heads=heads, dtype="fp8")
    assert_dtypes_dropped(standin)
    assert any(entry.startswith("work_info_set") for entry in standin.out_of_bounds)


def test_a_dropped_dtype_fails_the_build_in_check_mode(rocm, monkeypatch) -> None:
    backend, _ = rocm("gfx950", 8)
    monkeypatch.setattr(rocm_planner, "dtype_kwargs", lambda *a, **k: {})
    monkeypatch.setenv(rocm_planner.CHECK_PLAN_ENV, "1")
    with pytest.raises(PlanError, match="MLA_ROCM_CHECK_PLAN=1: AITER's plan differs"):
        build(backend, BatchSpec((300, 40), (1, 1)), num_heads=48, dtype="fp8")


def test_check_mode_passes_a_conforming_plan(rocm, monkeypatch) -> None:
    backend, _ = rocm("gfx942", 8)
    monkeypatch.setenv(rocm_planner.CHECK_PLAN_ENV, "1")
    meta = build(backend, BatchSpec((300, 40), (1, 1)), num_heads=128, dtype="fp8")
    assert meta.decode is not None and meta.decode.plan.num_works > 0


def test_swapped_buffers_are_caught_by_the_pointer_table(rocm, monkeypatch) -> None:
    backend, _ = rocm("gfx942", 8)
    correct = rocm_planner.metadata_args

    def swapped(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        made = list(correct(*args, **kwargs))
        made[7], made[8] = made[8], made[7]  # work_indptr before work_info_set: the info order
        return tuple(made)

    monkeypatch.setattr(rocm_planner, "metadata_args", swapped)
    with pytest.raises(PlanError, match=r"work_metadata_ptrs\[0\]: expected work_indptr"):
        build(backend, BatchSpec((90, 20), (1, 1)))


def test_a_missing_max_seqlen_qo_is_caught(rocm, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, standin = rocm("gfx942", 4)
    correct = rocm_planner.metadata_kwargs

    def without_max_seqlen(**kwargs: Any) -> dict[str, Any]:
        made = correct(**kwargs)
        del made["max_seqlen_qo"]  # AITER's default -1: no tail threshold (#2106)
        return made

    monkeypatch.setattr(rocm_planner, "metadata_kwargs", without_max_seqlen)
    meta = build(backend, TAIL)
    with pytest.raises(AssertionError, match="called without max_seqlen_qo"):
        assert_metadata_call_contract(standin, meta)
    problems = backend.native_plan_check(meta.decode)
    assert any(p.startswith("work_info_set") for p in problems), problems


def test_a_stale_pointer_table_is_refused_at_decode(rocm) -> None:
    backend, _ = rocm()
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec)
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=1)
    meta.decode.plan.work_indptr = meta.decode.plan.work_indptr.clone()
    with pytest.raises(PlanError, match=r"work_metadata_ptrs\[0\]"):
        backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    assert backend.native_plan_check(meta.decode) != []


def test_decoding_another_dtype_than_planned_is_refused(rocm) -> None:
    backend, _ = rocm("gfx942")
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec)  # planned for bf16
    q, cache = decode_inputs(meta, spec, num_heads=16, block_size=1)
    fp8 = fp8_of(backend)
    with pytest.raises(ValueError, match="vLLM #46997"):
        backend.decode(q.to(fp8), cache.to(fp8), meta.decode, sm_scale=SM_SCALE)


GATED = BatchSpec((20,) * 32, (1,) * 32)  # gfx950 bf16 16 heads S=1 batch 32: AITER's gate


def test_gated_batches_still_take_the_persistent_path(rocm) -> None:
    backend, standin = rocm("gfx950", 8)
    meta = build(backend, GATED)
    q, cache = decode_inputs(meta, GATED, num_heads=16, block_size=1)
    backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    assert_persistent_decode(standin)


def test_a_gate_aiter_reread_after_the_probe_is_refused_at_decode(rocm, monkeypatch) -> None:
    backend, standin = rocm("gfx950", 8)
    meta = build(backend, GATED)
    q, cache = decode_inputs(meta, GATED, num_heads=16, block_size=1)
    monkeypatch.setenv(rocm_probe.PERSISTENT_GATE_ENV, "32")
    standin._gate = None  # as if AITER's lru_cache had been cleared
    with pytest.raises(BackendUnavailable, match="AITER_MLA_DECODE_PERSISTENT_MAX_BATCH=32"):
        backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)


def test_an_adapter_without_the_gate_pin_is_caught(rocm, monkeypatch) -> None:
    backend, standin = rocm("gfx950", 8)
    for module, name in (
        (rocm_probe, "_pin_persistent_gate"),
        (rocm_probe, "_gate_read_by_aiter"),
        (rocm_decode, "_persistent_gate_problem"),
    ):
        monkeypatch.setattr(module, name, lambda *a: None)
    monkeypatch.delenv(rocm_probe.PERSISTENT_GATE_ENV)  # AITER's default: 32
    meta = build(backend, GATED)
    q, cache = decode_inputs(meta, GATED, num_heads=16, block_size=1)
    backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    with pytest.raises(AssertionError, match="non-persistent"):
        assert_persistent_decode(standin)


def test_standin_plans_bf16_when_dtypes_are_omitted_like_aiter(rocm) -> None:
    """The stand-in's None-means-bf16: omitted dtypes plan exactly like explicit bf16."""
    _, standin = rocm("gfx942", 8)
    aiter = standin.modules["aiter"]
    qo = torch.tensor([0, 1, 2], dtype=torch.int32)
    kv = torch.tensor([0, 300, 340], dtype=torch.int32)
    last = torch.ones(2, dtype=torch.int32)
    fp8 = fp8_dtype_for_arch("gfx942")
    results = []
    for dtypes in (
        {},
        {"dtype_q_nope": torch.bfloat16, "dtype_kv_nope": torch.bfloat16},
        {"dtype_q": fp8, "dtype_kv": fp8},
    ):
        sizes = aiter.get_mla_metadata_info_v1(2, 1, 128, fp8, fp8, False)
        buffers = [torch.full((s,) if isinstance(s, int) else s, -1, dtype=d) for s, d in sizes]
        ptrs, wi, wis, ri, rfm, rpm = buffers
        positional = (qo, kv, last, 128, 1, True, ptrs, wis, wi, ri, rfm, rpm)
        aiter.get_mla_metadata_v1(*positional, max_seqlen_qo=1, uni_seqlen_qo=1, **dtypes)
        results.append((int(wi[-1]), wis.clone()))
    omitted, bf16, fp8_plan = results
    assert omitted[0] == bf16[0] and torch.equal(omitted[1], bf16[1])
    assert omitted[0] != fp8_plan[0]  # 128 heads: folded by 8 for bf16, native for fp8
