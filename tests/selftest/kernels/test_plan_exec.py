"""Self-tests of plan execution: the work plan run work by work (fp32), then the reduce.

Plan execution (`kernels.plan_exec`) against the monolithic fp64 reference for hand-made and
reference-planner plans (split, folded, per-token tiles, fully masked rows), the −inf-safe
reduce, errors that name the work, fp8-q plan dependence within tolerance, and the CPU
emulation of each backend kind against its derived tolerance.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

from conformance.errors import PlanError
from conformance.numerics.compare import assert_close, compare
from conformance.numerics.fp8 import (
    fp8_dtype_for_arch,
    quantize_per_tensor,
)
from conformance.numerics.tolerances import Tolerance, lse_tolerance_for, tolerance_for
from kernels.plan_exec import fold_rows, reduce_partials, unfold_rows

# Shared inputs of this folder's reference tests (refcase.py is a helper, not a test module).
_REF = runpy.run_path(str(Path(__file__).with_name("refcase.py")))
Batch, make_batch, split_plan, run_plan = (
    _REF[name] for name in ("RefBatch", "make_batch", "split_plan", "run_plan")
)

# fp32 work-by-work execution vs the fp64 reference: observed errors are ~1e-7 (|S| ~ 1,
# K = 576); these bounds are ~100x that and far below any bf16 effect.
FP32_ROUNDING = Tolerance(atol=2e-5, rtol=2e-5, cos_diff=1e-10)
FP64_ROUNDING = Tolerance(atol=1e-12, rtol=1e-12, cos_diff=1e-20)


# --------------------------------------------------------------------------------------
# Plan execution


@pytest.mark.parametrize(
    ("q_len", "page_size", "splits"),
    [(1, 1, 3), (1, 16, 2), (2, 4, 3), (4, 1, 2)],
)
def test_plan_execution_equals_monolithic_for_bf16_q(
    q_len: int, page_size: int, splits: int
) -> None:
    kv_lens = [37, 5, 64, 18]
    batch = make_batch([q_len] * 4, kv_lens, page_size=page_size, seed=q_len + page_size)
    ref_out, ref_lse = batch.reference()
    plan = split_plan(q_len, kv_lens, page_size=page_size, splits=splits, heads=4)
    assert plan.split_tiles(), "the plan must split at least one tile"
    got = run_plan(batch, plan)
    assert_close(got.out, ref_out, tol=FP32_ROUNDING, name="out", dtype=torch.float32)
    assert_close(got.lse, ref_lse, tol=FP32_ROUNDING, name="lse", dtype=torch.float32)
    # Every partial row a split work owns was written, and no other.
    owned = torch.zeros_like(got.partial_written)
    for w in plan.works():
        if w.partial_qo_loc >= 0:
            owned[w.partial_qo_loc : w.partial_qo_loc + w.qo_end - w.qo_start] = True
    assert torch.equal(got.partial_written, owned)


def test_plan_output_does_not_depend_on_the_plan_for_bf16_q() -> None:
    kv_lens = [40, 23, 7]
    batch = make_batch([2, 2, 2], kv_lens, page_size=1, seed=11)
    unsplit = run_plan(batch, split_plan(2, kv_lens, page_size=1, splits=1, heads=4))
    split = run_plan(batch, split_plan(2, kv_lens, page_size=1, splits=4, heads=4))
    per_token = run_plan(
        batch, split_plan(2, kv_lens, page_size=1, splits=3, heads=4, token_tiles=True)
    )
    for other in (split, per_token):
        assert_close(other.out, unsplit.out, tol=FP32_ROUNDING, name="out")
        assert_close(other.lse, unsplit.lse, tol=FP32_ROUNDING, name="lse")


@pytest.mark.parametrize(("q_len", "splits"), [(1, 1), (2, 3)])
def test_folded_plan_equals_monolithic(q_len: int, splits: int) -> None:
    kv_lens = [19, 33]
    batch = make_batch([q_len] * 2, kv_lens, heads=8, page_size=4, seed=7)
    plan = split_plan(q_len, kv_lens, page_size=4, splits=splits, heads=8, fold_ratio=4)
    assert plan.heads_per_work == 2 and plan.num_tiles == 8
    got = run_plan(batch, plan)
    ref_out, ref_lse = batch.reference()
    assert_close(got.out, ref_out, tol=FP32_ROUNDING, name="out", dtype=torch.float32)
    assert_close(got.lse, ref_lse, tol=FP32_ROUNDING, name="lse", dtype=torch.float32)


def test_fold_rows_round_trip_and_layout() -> None:
    x = torch.arange(2 * 3 * 4).reshape(6, 4)  # B=2, S=3, H=4 → r=2: [B*r*S, 2]
    folded = fold_rows(x, 2, 3)
    assert folded.shape == (12, 2)
    # Virtual batch 1 = batch 0, head group 1: its S rows are heads 2..3 of tokens 0..2.
    assert torch.equal(folded[3:6], x[0:3, 2:4])
    assert torch.equal(unfold_rows(folded, 2, 3), x)


def test_split_with_fully_masked_rows_gives_zero_and_neg_inf() -> None:
    # kv_len 3 < q_len 4 (page 2, two single-page splits): row 0 sees no token in either
    # split, so both of its partial lse are -inf; the reduce must give 0 / -inf, not NaN.
    batch = make_batch([4], [3], page_size=2, seed=2)
    plan = split_plan(4, [3], page_size=2, splits=2, heads=4)
    got = run_plan(batch, plan)
    assert bool((got.partial_lse[[0, 4]] == float("-inf")).all())
    assert bool((got.out[0] == 0).all()) and bool((got.lse[0] == float("-inf")).all())
    ref_out, ref_lse = batch.reference()
    assert_close(got.out, ref_out, tol=FP32_ROUNDING, name="out", dtype=torch.float32)
    assert_close(got.lse, ref_lse, tol=FP32_ROUNDING, name="lse", dtype=torch.float32)


def test_reduce_all_neg_inf_group_gives_no_nan() -> None:
    heads = 3
    partial_out = torch.randn(6, heads, 8)
    partial_out[0:2] = float("nan")  # whatever an empty split holds must not leak
    partial_lse = torch.full((6, heads), float("-inf"))
    partial_lse[4, 1] = 0.5  # tile 1, one live split for one head
    out = torch.full((4, heads, 8), float("nan"))
    lse = torch.full((4, heads), float("nan"))
    reduce_partials(
        partial_out,
        partial_lse,
        reduce_indptr=torch.tensor([0, 2, 4], dtype=torch.int32),
        reduce_final_map=torch.tensor([[0, 2], [2, 3]], dtype=torch.int32),
        reduce_partial_map=torch.tensor([0, 2, 3, 4], dtype=torch.int32),
        out=out,
        lse=lse,
    )
    assert not bool(torch.isnan(out[:3]).any()) and not bool(torch.isnan(lse[:3]).any())
    assert bool((out[:2] == 0).all()) and bool((lse[:2] == float("-inf")).all())
    assert torch.equal(out[2, 1], partial_out[4, 1]) and float(lse[2, 1]) == 0.5
    assert bool((out[2, [0, 2]] == 0).all())
    assert bool(torch.isnan(out[3]).all())  # no tile writes row 3


def test_reduce_merges_like_logsumexp() -> None:
    gen = torch.Generator().manual_seed(4)
    partial_out = torch.randn(3, 2, 8, generator=gen, dtype=torch.float64)
    partial_lse = torch.randn(3, 2, generator=gen, dtype=torch.float64) * 3
    out = torch.zeros(1, 2, 8, dtype=torch.float64)
    lse = torch.zeros(1, 2, dtype=torch.float64)
    reduce_partials(
        partial_out,
        partial_lse,
        reduce_indptr=torch.tensor([0, 3]),
        reduce_final_map=torch.tensor([[0, 1]]),
        reduce_partial_map=torch.tensor([0, 1, 2]),
        out=out,
        lse=lse,
    )
    total = torch.logsumexp(partial_lse, 0)
    weights = torch.exp(partial_lse - total)  # [3, 2]
    assert torch.allclose(lse[0], total, rtol=0, atol=1e-12)
    assert torch.allclose(out[0], (weights[..., None] * partial_out).sum(0), atol=1e-12)


def test_plan_errors_name_the_work() -> None:
    batch = make_batch([1, 1], [8, 8], page_size=4)
    plan = split_plan(1, [8, 8], page_size=4, splits=1, heads=4)
    plan.work_info_set[1, 4] = 0  # batch 1's work now starts in batch 0's pages
    with pytest.raises(PlanError, match=r"work 1: .*kv_start=0"):
        run_plan(batch, plan)
    plan = split_plan(1, [8, 8], page_size=4, splits=1, heads=4)
    with pytest.raises(PlanError, match="heads_per_work"):
        run_plan(batch, plan.__class__(**{**plan.__dict__, "heads_per_work": 16}))


def test_fp8_q_results_depend_on_the_plan_but_stay_within_tolerance() -> None:
    fp8 = torch.float8_e4m3fnuz
    kv_lens = [300, 41]
    base = make_batch([1, 1], kv_lens, heads=8, page_size=1, seed=9)
    q8, q_scale = quantize_per_tensor(base.q.float(), fp8)
    c8, kv_scale = quantize_per_tensor(base.cache.float(), fp8)
    batch = Batch(**{**base.__dict__, "q": q8, "cache": c8})
    ref_out, ref_lse = batch.reference(q_scale=q_scale, kv_scale=kv_scale)
    scales = {"q_scale": q_scale, "kv_scale": kv_scale}
    one = run_plan(batch, split_plan(1, kv_lens, page_size=1, splits=1, heads=8), **scales)
    four = run_plan(batch, split_plan(1, kv_lens, page_size=1, splits=4, heads=8), **scales)
    assert not torch.equal(one.out, four.out)  # P is rounded against each work's own max
    tol = tolerance_for(fp8, fp8, "fp32-reference")
    for got in (one, four):
        assert_close(got.out.to(torch.bfloat16), ref_out, tol=tol, name="out", dtype=torch.bfloat16)
        # lse uses the unrounded P: plan independent up to fp32 rounding
        assert_close(got.lse, ref_lse, tol=FP32_ROUNDING, name="lse", dtype=torch.float32)
    # Without P rounding the executor is the monolithic reference again.
    exact = run_plan(
        batch, split_plan(1, kv_lens, page_size=1, splits=4, heads=8), fp8_p=False, **scales
    )
    assert_close(exact.out, ref_out, tol=FP32_ROUNDING, name="out", dtype=torch.float32)


@pytest.mark.parametrize(
    ("heads", "q_len", "page_size", "arch", "q_fp8"),
    [
        (16, 2, 16, "gfx942", False),  # native 16 heads, page > 1, short last pages
        (48, 2, 1, "gfx942", False),  # folded 3 x 16, MTP
        (128, 2, 1, "gfx942", True),  # native fp8 128 heads: one tile per query token
        (32, 1, 1, "gfx950", False),  # gfx950 bf16: native 32 heads
    ],
)
def test_reference_planner_plans_execute_to_the_monolithic_result(
    heads: int, q_len: int, page_size: int, arch: str, q_fp8: bool
) -> None:
    """The planner and the executor read the plan format the same way."""
    from conformance.persistent.planner import plan_persistent_decode

    kv_lens = [300, 5, 60, 18]
    batch = make_batch([q_len] * 4, kv_lens, heads=heads, page_size=page_size, seed=heads)
    scales: dict[str, float] = {}
    if q_fp8:
        fp8 = fp8_dtype_for_arch(arch)
        q8, q_scale = quantize_per_tensor(batch.q.float(), fp8)
        c8, kv_scale = quantize_per_tensor(batch.cache.float(), fp8)
        batch = Batch(**{**batch.__dict__, "q": q8, "cache": c8})
        scales = {"q_scale": q_scale, "kv_scale": kv_scale}
    kv_indptr, _, last = batch.csr()
    plan = plan_persistent_decode(
        batch.query_start_loc,
        kv_indptr,
        last,
        num_heads_q=heads,
        max_seqlen_qo=q_len,
        uni_seqlen_qo=q_len,
        page_size=page_size,
        kv_granularity=max(page_size, 16),
        causal=True,
        max_split_per_batch=32,
        q_dtype=batch.q.dtype,
        kv_dtype=batch.cache.dtype,
        arch=arch,
        num_cus=16,
    )
    assert plan.split_tiles(), "the case must exercise split tiles and the reduce"
    assert plan.fold_ratio == (3 if heads == 48 else 1)
    got = run_plan(batch, plan, **scales)
    ref_out, ref_lse = batch.reference(**scales)
    if q_fp8:
        tol = tolerance_for(batch.q.dtype, batch.cache.dtype, "fp32-reference")
        assert_close(got.out.to(torch.bfloat16), ref_out, tol=tol, name="out", dtype=torch.bfloat16)
    else:
        assert_close(got.out, ref_out, tol=FP32_ROUNDING, name="out", dtype=torch.float32)
    assert_close(got.lse, ref_lse, tol=FP32_ROUNDING, name="lse", dtype=torch.float32)


# --------------------------------------------------------------------------------------
# The error model against the CPU emulation of each backend kind (a model check, not tuning)


@pytest.mark.parametrize(
    ("q_kind", "kind", "p_dtype"),
    [
        ("bf16", "fp32-reference", None),
        ("bf16", "tensor-core", torch.bfloat16),
        ("e4m3", "fp32-reference", None),
        ("e4m3", "tensor-core", None),
    ],
)
@pytest.mark.parametrize(("kv_lens", "q_len"), [([2, 2, 3], 1), ([21, 300], 2)])
def test_emulated_kinds_pass_their_tolerance_with_room(
    q_kind: str, kind: str, p_dtype: torch.dtype | None, kv_lens: list[int], q_len: int
) -> None:
    base = make_batch([q_len] * len(kv_lens), kv_lens, heads=16, page_size=16, seed=q_len)
    fp8 = torch.float8_e4m3fn
    scales: dict[str, float] = {}
    if q_kind == "e4m3":
        q8, q_scale = quantize_per_tensor(base.q.float(), fp8)
        c8, kv_scale = quantize_per_tensor(base.cache.float(), fp8)
        base = Batch(**{**base.__dict__, "q": q8, "cache": c8})
        scales = {"q_scale": q_scale, "kv_scale": kv_scale}
    ref_out, ref_lse = base.reference(**scales)
    plan = split_plan(q_len, kv_lens, page_size=16, splits=3, heads=16)
    got = run_plan(base, plan, fp8_p=p_dtype, **scales)
    tol = tolerance_for(base.q.dtype, base.cache.dtype, kind)
    report = assert_close(
        got.out.to(torch.bfloat16), ref_out, tol=tol, name="out", dtype=torch.bfloat16
    )
    assert report.cos_diff < tol.cos_diff / 3, report.message()
    lse_tol = lse_tolerance_for(base.q.dtype, base.cache.dtype, kind)
    lse_report = compare(got.lse, ref_lse, tol=lse_tol, name="lse", dtype=torch.float32)
    assert lse_report.ok and lse_report.max_abs_err < lse_tol.atol / 10, lse_report.message()
