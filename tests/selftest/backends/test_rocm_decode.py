"""The ROCm adapter's decode wiring, against the AITER stand-in (fake_aiter.py) on the CPU.

What is proved here: the adapter keeps the pointer table honest and converts layouts and
scales for ``mla_decode_fwd`` and its results back, matching the reference. Stand-in results
are never a rocm conformance run (`standin_never_into_reports`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any

import pytest
import torch
from mla_selftest_rocm_wiring import (  # rocm_wiring.py, registered by conftest.py
    SM_SCALE,
    assert_persistent_decode,
    build,
    decode_inputs,
    fp8_of,
    reference_plan_output,
)

from backends.rocm.backend import RocmAiterBackend
from backends.rocm.decode import kernel_for
from conformance.errors import PlanError
from conformance.metadata.batch import BatchSpec
from conformance.numerics.fp8 import quantize_per_tensor
from conformance.persistent.planner import plan_persistent_decode
from kernels.reference import mla_decode_reference

pytestmark = pytest.mark.usefixtures("standin_never_into_reports")


# ---------------------------------------------------------------------------------------
# Decoding

DECODE_CASES = [
    # (id, arch, spec, block_size, heads)
    ("gfx942-16h", "gfx942", BatchSpec((90, 20, 47), (1, 1, 1)), 1, 16),
    ("gfx942-32h-fold-mtp2", "gfx942", BatchSpec((64, 30), (2, 2)), 16, 32),
    ("gfx950-64h-mtp3-qo-split", "gfx950", BatchSpec((50, 60), (3, 3)), 1, 64),
    ("gfx950-16h", "gfx950", BatchSpec((90, 20, 47), (1, 1, 1)), 1, 16),
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
    shipped = kernel_for(
        backend.runtime().kernels, q, cache, q_len=max(spec.query_lens), causal=True
    )
    asked = standin.calls_to("mla_decode_fwd")[-1].kwargs["return_lse"]
    assert asked is (shipped.lse_kernel is not None), "LSE asked for exactly where AITER has it"
    assert out.dtype == torch.bfloat16 and out.shape == (q.shape[0], heads, 512)
    assert not out.isnan().any()
    expected = reference_plan_output(meta, q, cache)
    torch.testing.assert_close(out, expected.out.to(torch.bfloat16), rtol=0, atol=0)
    if lse is None:
        assert not asked
        return
    assert lse.dtype == torch.float32 and lse.shape == (q.shape[0], heads)
    assert not lse.isnan().any()
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
    meta = build(backend, spec, num_heads=64, dtype="fp8")  # gfx942's one LSE kernel
    q16, cache16 = decode_inputs(meta, spec, num_heads=64, block_size=1)
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
    assert call.kwargs["num_kv_splits"] is None
    assert call.kwargs["return_lse"] is False, "gfx942 ships no bf16 LSE kernel"
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
