"""Self-tests of the numerical reference: fp8 helpers, paged gathering, monolithic decode.

The monolithic fp64 reference is checked against a naive per-request, per-token loop, with
NaN-poisoned slack slots, empty and causal multi-token rows, and an fp8 cache with a non-unit
scale. Plan execution is tested in test_plan_exec.py.
"""

from __future__ import annotations

import functools
import runpy
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conformance.numerics.compare import assert_close
from conformance.numerics.fp8 import (
    dequantize,
    fp8_dtype_for_arch,
    fp8_max,
    is_fp8,
    quantize_per_tensor,
)
from conformance.numerics.tolerances import Tolerance
from kernels.paged import gather_csr_kv, gather_request_kv

# Shared inputs of this folder's reference tests (refcase.py is a helper, not a test module).
_REF = runpy.run_path(str(Path(__file__).with_name("refcase.py")))
Batch, make_batch, split_plan, run_plan, DV, SM_SCALE = (
    _REF[name] for name in ("RefBatch", "make_batch", "split_plan", "run_plan", "DV", "SM_SCALE")
)

# fp32 work-by-work execution vs the fp64 reference: observed errors are ~1e-7 (|S| ~ 1,
# K = 576); these bounds are ~100x that and far below any bf16 effect.
FP32_ROUNDING = Tolerance(atol=2e-5, rtol=2e-5, cos_diff=1e-10)
FP64_ROUNDING = Tolerance(atol=1e-12, rtol=1e-12, cos_diff=1e-20)


def naive_decode(
    batch: Batch, *, q_scale: float = 1.0, kv_scale: float = 1.0, causal: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per request, per query row, per head; tokens fetched one at a time from the table."""
    tokens, heads, _ = batch.q.shape
    out = torch.zeros(tokens, heads, DV, dtype=torch.float64)
    lse = torch.full((tokens, heads), float("-inf"), dtype=torch.float64)
    qsl = batch.query_start_loc.tolist()
    for b, seq_len in enumerate(batch.seq_lens.tolist()):
        q_len = qsl[b + 1] - qsl[b]
        for i in range(q_len):
            row = qsl[b] + i
            last = seq_len - q_len + i if causal else seq_len - 1
            if last < 0:
                continue
            keys = []
            for t in range(last + 1):
                page = int(batch.block_table[b, t // batch.page_size])
                keys.append(batch.cache[page, t % batch.page_size].double())
            k = torch.stack(keys)
            for h in range(heads):
                s = (k @ batch.q[row, h].double()) * SM_SCALE * q_scale * kv_scale
                out[row, h] = torch.softmax(s, 0) @ k[:, :DV] * kv_scale
                lse[row, h] = torch.logsumexp(s, 0)
    return out, lse


# --------------------------------------------------------------------------------------
# fp8 helpers and paging


def test_fp8_dtype_for_arch() -> None:
    assert fp8_dtype_for_arch("gfx942") is torch.float8_e4m3fnuz
    assert fp8_dtype_for_arch("gfx950") is torch.float8_e4m3fn
    assert fp8_dtype_for_arch("sm90") is torch.float8_e4m3fn
    assert is_fp8(torch.float8_e4m3fnuz) and is_fp8(torch.float8_e5m2)
    assert not is_fp8(torch.bfloat16) and not is_fp8(torch.int8)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_quantize_per_tensor_amax_scale(dtype: torch.dtype) -> None:
    x = torch.randn(64, 576, generator=torch.Generator().manual_seed(1)) * 3
    x[0, 0] = float("nan")
    xq, scale = quantize_per_tensor(x, dtype)
    finite = torch.isfinite(x)
    assert scale != 1.0
    assert scale == pytest.approx(float(x[finite].abs().max()) / fp8_max(dtype), rel=1e-6)
    back = dequantize(xq, scale, torch.float64)
    assert torch.isnan(back[0, 0]) and bool(torch.isfinite(back[finite]).all())
    # Round to nearest with 3 mantissa bits: relative error <= 2^-4 above the subnormals.
    normal = finite & (x.abs() >= scale * torch.finfo(dtype).smallest_normal)
    rel = ((back - x.double()).abs() / x.double().abs())[normal]
    assert float(rel.max()) <= 2.0**-4 + 1e-9
    # An explicit scale that would overflow clamps instead of producing NaN (fnuz).
    big, _ = quantize_per_tensor(torch.tensor([1e6, -1e6]), dtype, scale=1.0)
    assert big.float().tolist() == [fp8_max(dtype), -fp8_max(dtype)]


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_block_table_to_csr_matches_block_table_gather(page_size: int) -> None:
    batch = make_batch([1, 1, 1, 1], [0, 5, 16, 33], page_size=page_size)
    kv_indptr, kv_indices, last = batch.csr()
    pages = [(n + page_size - 1) // page_size for n in batch.seq_lens.tolist()]
    assert kv_indptr.tolist() == [0, *torch.cumsum(torch.tensor(pages), 0).tolist()]
    assert kv_indptr.dtype == kv_indices.dtype == last.dtype == torch.int32
    gather = functools.partial(
        gather_csr_kv, batch.cache, kv_indptr=kv_indptr, kv_indices=kv_indices, page_size=page_size
    )
    for b, n in enumerate(batch.seq_lens.tolist()):
        assert int(last[b]) == (n - (pages[b] - 1) * page_size if n else page_size)
        direct = gather_request_kv(batch.cache, batch.block_table[b], n, page_size)
        via_csr = gather(batch=b, start=0, end=n)
        assert torch.equal(direct, via_csr)
        assert not bool(torch.isnan(direct.float()).any())


# --------------------------------------------------------------------------------------
# Monolithic reference


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_reference_matches_naive_loop(page_size: int) -> None:
    batch = make_batch([1, 3, 2, 4], [7, 9, 1, 20], page_size=page_size, seed=page_size)
    out, lse = batch.reference(q_scale=0.75, kv_scale=1.25)
    want_out, want_lse = naive_decode(batch, q_scale=0.75, kv_scale=1.25)
    assert_close(out, want_out, tol=FP64_ROUNDING, name="out")
    assert_close(lse, want_lse, tol=FP64_ROUNDING, name="lse")
    out_nc, _ = batch.reference(causal=False)
    assert_close(out_nc, naive_decode(batch, causal=False)[0], tol=FP64_ROUNDING, name="out")


def test_nan_poisoned_slots_never_reach_output() -> None:
    poisoned = make_batch([2, 2, 2], [5, 6, 13], page_size=4, seed=3)
    clean = make_batch([2, 2, 2], [5, 6, 13], page_size=4, seed=3, poison=0.0)
    assert bool(torch.isnan(poisoned.cache.float()).any())  # slack slots and spare pages
    out, lse = poisoned.reference()
    assert not bool(torch.isnan(out).any()) and not bool(torch.isnan(lse).any())
    want_out, want_lse = clean.reference()
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    plan_out = run_plan(poisoned, split_plan(2, [5, 6, 13], page_size=4, splits=2, heads=4))
    assert not bool(torch.isnan(plan_out.out).any())
    assert not bool(torch.isnan(plan_out.lse).any())


def test_kv_len_zero_row_gives_zero_output_and_neg_inf_lse() -> None:
    batch = make_batch([1, 1, 3], [0, 4, 1], page_size=4)
    out, lse = batch.reference()
    # Request 0 has no kv; request 2 has 1 kv token and 3 queries: rows 0 and 1 see nothing.
    for row in (0, 2, 3):
        assert bool((out[row] == 0).all()), row
        assert bool((lse[row] == float("-inf")).all()), row
    assert bool(torch.isfinite(lse[[1, 4]]).all())
    assert not bool(torch.isnan(out).any())


@pytest.mark.parametrize("q_len", [2, 3, 4])
def test_causal_multi_token_masks(q_len: int) -> None:
    kv_len = 9
    batch = make_batch([q_len], [kv_len], page_size=4, seed=q_len)
    out, lse = batch.reference()
    for i in range(q_len):
        # Row i sees exactly kv positions [0, L - s + i]: a single-query request over
        # those tokens gives the same row.
        one = replace(
            batch,
            q=batch.q[i : i + 1],
            query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
            seq_lens=torch.tensor([kv_len - q_len + i + 1], dtype=torch.int32),
        )
        want_out, want_lse = one.reference()
        assert_close(out[i], want_out[0], tol=FP64_ROUNDING, name=f"out row {i}")
        assert_close(lse[i], want_lse[0], tol=FP64_ROUNDING, name=f"lse row {i}")
    out_nc, _ = batch.reference(causal=False)
    assert not torch.allclose(out_nc[0], out[0])  # the mask did something
    assert_close(out_nc[-1], out[-1], tol=FP64_ROUNDING, name="last row")  # sees everything


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_fp8_kv_with_non_unit_scale_matches_dequantised_math(fp8: torch.dtype) -> None:
    batch = make_batch([2, 2], [11, 6], page_size=4, seed=5)
    cache8, kv_scale = quantize_per_tensor(batch.cache.float(), fp8)
    assert kv_scale != 1.0
    fp8_batch = Batch(**{**batch.__dict__, "cache": cache8})
    out, lse = fp8_batch.reference(kv_scale=kv_scale)
    # Same math on the cache dequantised in fp64, scale 1.
    deq = Batch(**{**batch.__dict__, "cache": dequantize(cache8, kv_scale, torch.float64)})
    want_out, want_lse = deq.reference()
    assert_close(out, want_out, tol=FP64_ROUNDING, name="out")
    assert_close(lse, want_lse, tol=FP64_ROUNDING, name="lse")
    # With a power-of-two scale the bf16 dequantised cache is exact: bf16 math agrees too.
    cache8p2, scale_p2 = quantize_per_tensor(batch.cache.float(), fp8, scale=2.0**-5)
    out8, _ = Batch(**{**batch.__dict__, "cache": cache8p2}).reference(kv_scale=scale_p2)
    bf16_cache = dequantize(cache8p2, scale_p2, torch.bfloat16)
    out_bf, _ = Batch(**{**batch.__dict__, "cache": bf16_cache}).reference()
    assert_close(out8, out_bf, tol=FP64_ROUNDING, name="out")
    # The plan executor (bf16 q, fp8 kv: no P rounding) agrees within fp32 rounding.
    plan = split_plan(2, [11, 6], page_size=4, splits=2, heads=4)
    got = run_plan(fp8_batch, plan, kv_scale=kv_scale)
    assert_close(got.out, out, tol=FP32_ROUNDING, name="out", dtype=torch.float32)
    assert_close(got.lse, lse, tol=FP32_ROUNDING, name="lse", dtype=torch.float32)
