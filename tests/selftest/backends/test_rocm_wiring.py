"""The ROCm adapter's planning wiring, run against the AITER stand-in (fake_aiter.py) on the CPU.

What is proved here: the adapter calls AITER's metadata functions with the right arguments in
the right positions (every dtype explicit, ``max_seqlen_qo``/``uni_seqlen_qo`` always,
``work_info_set`` before ``work_indptr``) and reads AITER's buffers back into a `WorkPlan`
that matches the reference planner. Decoding is in test_rocm_decode.py, the negative controls
(a misbehaving adapter is caught) in test_rocm_negative.py; their helpers in rocm_wiring.py.

What is not proved here: that AMD AITER behaves like the stand-in (the hardware run does
that, through family C's native plan check and the decode families). Nothing here writes
JUnit: stand-in results are never a rocm conformance run (`standin_never_into_reports`).
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest
import torch
from mla_selftest_rocm_wiring import (  # rocm_wiring.py, registered by conftest.py
    FOUR,
    LAYER,
    TAIL,
    THREE,
    assert_metadata_call_contract,
    assert_native_plan_conforms,
    build,
)

from backends.base import BuilderConfig, KVCacheSpec
from backends.rocm import planner as rocm_planner
from backends.rocm.planner import AiterWorkPlan
from conformance.errors import PlanError
from conformance.metadata.batch import BatchSpec, make_cam
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.persistent.aiter_check import aiter_plan_matches_reference
from conformance.persistent.planner import plan_persistent_decode
from conformance.stubs.protocol import MLAAttentionLayer

pytestmark = pytest.mark.usefixtures("standin_never_into_reports")


# ---------------------------------------------------------------------------------------
# Planning

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
