"""Negative controls for the numerical reference: broken implementations the checks reject.

1. A reduce without the −inf guard: on a split tile whose first query row sees no kv token
   (kv_len 3 < q_len 4, AITER's page>1 short-tail hazard) every split of that row has
   ``lse = -inf``; the naive merge computes ``exp(-inf - (-inf)) = NaN``, and the
   comparator must reject the NaN positions.
2. Decodes that drop a scale (kv_scale everywhere, kv_scale on V only, q_scale): the derived
   tolerance must reject each, while the correct computation passes the same check.
3. A plan that drops a work leaves NaN rows, which the comparator must reject.
4. A decode that reads the slack slots of its last page (NaN-poisoned) and one that skips the
   causal mask for multi-token queries: both must be rejected.
"""

from __future__ import annotations

import math
import runpy
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conformance.numerics.compare import assert_close, compare
from conformance.numerics.fp8 import quantize_per_tensor
from conformance.numerics.tolerances import tolerance_for
from conformance.persistent.plan import WorkPlan
from kernels.paged import gather_request_kv
from kernels.plan_exec import reduce_partials
from kernels.reference import attend_rows

# Shared inputs of this folder's reference tests (refcase.py is a helper, not a test module).
_REF = runpy.run_path(str(Path(__file__).with_name("refcase.py")))
Case, D, DV, SM_SCALE = (_REF[name] for name in ("RefBatch", "D", "DV", "SM_SCALE"))
BF16_TOL = tolerance_for(torch.bfloat16, torch.bfloat16, "fp32-reference")


def short_tail_case() -> tuple[Case, WorkPlan]:
    """One request, q_len 4, kv_len 3, page size 2 (2 pages), and a 2-way split plan."""
    gen = torch.Generator().manual_seed(0)
    cache = torch.full((3, 2, D), float("nan"))
    cache[2, 0], cache[2, 1], cache[0, 0] = torch.randn(3, D, generator=gen)
    case = Case(
        q=torch.randn(4, 4, D, generator=gen).to(torch.bfloat16),
        cache=cache.to(torch.bfloat16),
        query_start_loc=torch.tensor([0, 4], dtype=torch.int32),
        seq_lens=torch.tensor([3], dtype=torch.int32),
        block_table=torch.tensor([[2, 0]], dtype=torch.int32),
    )
    i32 = torch.int32
    # (batch, loc, qo_start, qo_end, kv_start, kv_end, kv_offset, pad): page 0 holds tokens
    # 0-1 (1 token after it), page 1 holds token 2. Row 0 sees kv positions [0, -1]: nothing.
    works = [[0, 0, 0, 4, 0, 1, 1, 0], [0, 4, 0, 4, 1, 2, 0, 0]]
    plan = WorkPlan(
        work_indptr=torch.tensor([0, 1, 2], dtype=i32),
        work_info_set=torch.tensor(works, dtype=i32),
        reduce_indptr=torch.tensor([0, 2], dtype=i32),
        reduce_final_map=torch.tensor([[0, 4]], dtype=i32),
        reduce_partial_map=torch.tensor([0, 4], dtype=i32),
        num_works=2,
        num_partials=2,
        num_tiles=1,
        heads_per_work=4,
        max_seqlen_qo=4,
    )
    return case, plan


def unguarded_reduce(
    partial_out: torch.Tensor, partial_lse: torch.Tensor, plan: WorkPlan
) -> tuple[torch.Tensor, torch.Tensor]:
    """BROKEN: the textbook merge of one tile, with no case for splits whose lse is -inf."""
    rows = plan.max_seqlen_qo
    locs = plan.reduce_partial_map.tolist()
    lse_k = torch.stack([partial_lse[loc : loc + rows] for loc in locs])
    o_k = torch.stack([partial_out[loc : loc + rows] for loc in locs])
    m = lse_k.max(dim=0).values
    w = torch.exp(lse_k - m)
    total = w.sum(dim=0)
    return (w[..., None] * o_k).sum(0) / total[..., None], m + torch.log(total)


def test_reduce_without_neg_inf_guard_produces_nan_and_is_caught() -> None:
    case, plan = short_tail_case()
    got = case.run(plan)
    assert bool((got.partial_lse[[0, 4]] == float("-inf")).all())  # the hazard is present
    ref_out, ref_lse = case.reference()
    # Positive control: the guarded reduce matches the reference.
    assert_close(
        got.out.to(torch.bfloat16), ref_out, tol=BF16_TOL, name="out", dtype=torch.bfloat16
    )
    broken_out, broken_lse = unguarded_reduce(got.partial_out, got.partial_lse, plan)
    assert bool(torch.isnan(broken_out[0]).all()) and bool(torch.isnan(broken_lse[0]).all())
    match = (
        r"out: MISMATCH[\s\S]*NaN/Inf positions differ at \d+ element\(s\), first at \(0, 0, 0\)"
    )
    with pytest.raises(AssertionError, match=match):
        assert_close(
            broken_out.to(torch.bfloat16), ref_out, tol=BF16_TOL, name="out", dtype=torch.bfloat16
        )
    with pytest.raises(AssertionError, match="NaN/Inf positions differ"):
        assert_close(broken_lse, ref_lse, tol=BF16_TOL, name="lse", dtype=torch.float32)
    # The library reduce on the same partials is NaN free.
    out = torch.full_like(broken_out, float("nan"))
    lse = torch.full_like(broken_lse, float("nan"))
    reduce_partials(
        got.partial_out,
        got.partial_lse,
        reduce_indptr=plan.reduce_indptr,
        reduce_final_map=plan.reduce_final_map,
        reduce_partial_map=plan.reduce_partial_map,
        out=out,
        lse=lse,
    )
    assert not bool(torch.isnan(out).any()) and not bool(torch.isnan(lse).any())


def test_plan_that_drops_a_work_is_caught() -> None:
    case, plan = short_tail_case()
    dropped = replace(plan, work_indptr=torch.tensor([0, 1, 1], dtype=torch.int32))
    got = case.run(dropped)
    ref_out, _ = case.reference()
    out = got.out.to(torch.bfloat16)
    report = compare(out, ref_out, tol=BF16_TOL, name="out", dtype=torch.bfloat16)
    assert not report.ok and "NaN/Inf positions differ" in report.message()


# --------------------------------------------------------------------------------------
# Decodes that ignore a scale


def fp8_case(q_fp8: bool) -> Case:
    """Two requests over an e4m3fnuz cache (amax scale, far from 1); q e4m3 or bf16."""
    gen = torch.Generator().manual_seed(1)
    cache8, kv_scale = quantize_per_tensor(
        torch.randn(5, 16, D, generator=gen), torch.float8_e4m3fnuz
    )
    q = torch.randn(2, 16, D, generator=gen)
    q_in, q_scale = (
        quantize_per_tensor(q, torch.float8_e4m3fnuz) if q_fp8 else (q.to(torch.bfloat16), 1.0)
    )
    assert abs(math.log2(kv_scale)) > 4 and (not q_fp8 or abs(math.log2(q_scale)) > 4)
    return Case(
        q=q_in,
        cache=cache8,
        query_start_loc=torch.tensor([0, 1, 2], dtype=torch.int32),
        seq_lens=torch.tensor([45, 17], dtype=torch.int32),
        block_table=torch.tensor([[4, 1, 3], [0, 2, 0]], dtype=torch.int32),
        q_scale=q_scale,
        kv_scale=kv_scale,
    )


def decode(case: Case, *, q_scale: float, score_kv_scale: float, v_kv_scale: float) -> torch.Tensor:
    """An fp32 decode taking each scale explicitly, so a broken variant can drop one."""
    outs = []
    for b, seq_len in enumerate(case.seq_lens.tolist()):
        kv = gather_request_kv(case.cache, case.block_table[b], seq_len, case.page_size).float()
        o, _ = attend_rows(
            case.q[b : b + 1].float(),
            kv,
            visible=torch.tensor([seq_len]),
            scale=SM_SCALE * q_scale * score_kv_scale,
            v_scale=v_kv_scale,
            kv_lora_rank=DV,
        )
        outs.append(o)
    return torch.cat(outs).to(torch.bfloat16)


@pytest.mark.parametrize(
    ("q_fp8", "broken"),
    [
        (False, "kv_scale ignored"),
        (False, "kv_scale ignored on V"),
        (True, "kv_scale ignored"),
        (True, "q_scale ignored"),
    ],
)
def test_decode_ignoring_a_scale_is_caught_by_the_tolerance(q_fp8: bool, broken: str) -> None:
    case = fp8_case(q_fp8)
    q_s, kv_s = case.q_scale, case.kv_scale
    ref_out, _ = case.reference()
    tol = tolerance_for(case.q.dtype, case.cache.dtype, "fp32-reference")
    correct = decode(case, q_scale=q_s, score_kv_scale=kv_s, v_kv_scale=kv_s)
    assert_close(correct, ref_out, tol=tol, name="out", dtype=torch.bfloat16)  # positive control
    wrong = {
        "kv_scale ignored": {"q_scale": q_s, "score_kv_scale": 1.0, "v_kv_scale": 1.0},
        "kv_scale ignored on V": {"q_scale": q_s, "score_kv_scale": kv_s, "v_kv_scale": 1.0},
        "q_scale ignored": {"q_scale": 1.0, "score_kv_scale": kv_s, "v_kv_scale": kv_s},
    }[broken]
    with pytest.raises(AssertionError, match="out: MISMATCH"):
        assert_close(decode(case, **wrong), ref_out, tol=tol, name="out", dtype=torch.bfloat16)


# --------------------------------------------------------------------------------------
# Decodes that read past seq_len or skip the causal mask


def mtp_case() -> Case:
    """Two requests with 3 query tokens each over a NaN-poisoned page-size-4 cache."""
    gen = torch.Generator().manual_seed(2)
    cache = torch.full((6, 4, D), float("nan"))
    seq_lens = [10, 7]
    table = torch.tensor([[5, 0, 3], [1, 4, 2]], dtype=torch.int32)
    flat = cache.view(-1, D)
    for b, n in enumerate(seq_lens):
        t = torch.arange(n)
        flat[table[b, t // 4].long() * 4 + t % 4] = torch.randn(n, D, generator=gen)
    return Case(
        q=torch.randn(6, 8, D, generator=gen).to(torch.bfloat16),
        cache=cache.to(torch.bfloat16),
        query_start_loc=torch.tensor([0, 3, 6], dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_table=table,
    )


def whole_page_decode(case: Case) -> torch.Tensor:
    """BROKEN: attends every slot of the request's pages, slack slots included."""
    outs = []
    qsl = case.query_start_loc.tolist()
    for b, seq_len in enumerate(case.seq_lens.tolist()):
        pages = -(-seq_len // case.page_size)
        padded = pages * case.page_size
        kv = gather_request_kv(case.cache, case.block_table[b], padded, case.page_size).float()
        rows = qsl[b + 1] - qsl[b]
        visible = (seq_len - rows + 1 + torch.arange(rows)).clamp(0, seq_len)
        visible = visible + (padded - seq_len)  # "the page is ours": off by the slack
        o, _ = attend_rows(
            case.q[qsl[b] : qsl[b + 1]].float(),
            kv,
            visible=visible,
            scale=SM_SCALE,
            v_scale=1.0,
            kv_lora_rank=DV,
        )
        outs.append(o)
    return torch.cat(outs).to(torch.bfloat16)


def test_decode_reading_slack_slots_is_caught() -> None:
    case = mtp_case()
    ref_out, _ = case.reference()
    assert not bool(torch.isnan(ref_out).any())
    with pytest.raises(AssertionError, match="NaN/Inf positions differ"):
        assert_close(
            whole_page_decode(case), ref_out, tol=BF16_TOL, name="out", dtype=torch.bfloat16
        )


def test_decode_without_causal_mask_is_caught() -> None:
    case = mtp_case()
    ref_out, _ = case.reference()
    no_mask, _ = case.reference(causal=False)
    with pytest.raises(AssertionError, match="out: MISMATCH"):
        assert_close(
            no_mask.to(torch.bfloat16), ref_out, tol=BF16_TOL, name="out", dtype=torch.bfloat16
        )
