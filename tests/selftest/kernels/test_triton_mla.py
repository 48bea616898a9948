"""Self-tests of the Triton persistent MLA decode and reduce kernels (kernels/triton_mla/).

On a machine without CUDA the kernels run on the Triton CPU interpreter (triton_cases.py sets
``TRITON_INTERPRET=1`` before Triton is imported); with CUDA they run natively. Plans are made
by hand (`hand_plan`) and cover unsplit and split works, page sizes 1 and 16, a permuted block
table, causal q_len 2 (with a fully masked row and a fully masked split), H=16, a folded H=32
plan, a non-power-of-two head count, multi-chunk tiles, and bf16/fp8 KV with a non-unit
kv_scale.
Every KV-cache slot past a sequence and every unused page holds NaN.

Error model (fp64 reference from the same quantised inputs): q and K are exact in bf16 (fp8
converts to bf16 exactly), so scores carry only fp32 rounding (|Δs| ≲ 1e-6). The kernel rounds
P to bf16 before PV and rounds O to bf16; one bf16 rounding has relative error < ε = 2⁻⁷ (one
ulp: a GPU rounds to nearest, ε/2, but Triton 3.9's interpreter truncates). Rounding P
perturbs O = ΣpV/Σp by < ε·max|V|, rounding O by < ε·|O|, and fp32 accumulation/exp2 add
≲ 1e-5·max|V|. Hence |O − O_ref| ≤ ε·(max|V| + |O_ref|) + 1e-5·max|V|, and
|lse − lse_ref| ≤ 1e-4 (fp32 score/exp2/log roundoff, with margin).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

# Inputs, plans and reference (triton_cases.py is a helper, not a test module); importing it
# puts the kernels on Triton's interpreter when there is no CUDA device.
_CASES = runpy.run_path(str(Path(__file__).with_name("triton_cases.py")))
NAMES = "BF16_REL_ERR DEVICE FP8 Tile WorkPlan check hand_plan make_case planned run tm"
BF16_REL_ERR, DEVICE, FP8, Tile, WorkPlan, check, hand_plan, make_case, planned, run, tm = (
    _CASES[name] for name in NAMES.split()
)
unfolded_tiles = _CASES["unfolded_tiles"]


# --------------------------------------------------------------------------------------------
# Positive cases
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
def test_page1_unsplit_and_split_works(causal: bool) -> None:
    case = make_case([37, 5, 150, 20], q_len=1, num_heads=16, page_size=1, seed=1)
    tiles = unfolded_tiles(case, {0: (16,), 2: (16, 80)})  # works of 1 to 2 kv tiles
    plan = hand_plan(case, tiles, num_programs=5, heads_per_work=16)
    assert plan.num_partials == 5 and plan.work_indptr[-2] == plan.work_indptr[-1]  # empty prog
    check(case, plan, causal=causal)


@pytest.mark.parametrize("block_n", [64, 16], ids=["gather-per-token", "page-per-tile"])
def test_page16_causal_q2_permuted_table(block_n: int) -> None:
    # b1 = 17 tokens split after page 1: the last fragment holds one token, so q row 0 sees
    # nothing in that split (lse=-inf partial). b3 = 1 token with q_len 2: q row 0 sees no kv.
    case = make_case([40, 17, 33, 1], q_len=2, num_heads=16, page_size=16, seed=2)
    tiles = unfolded_tiles(case, {0: (1, 2), 1: (1,)})
    plan = hand_plan(case, tiles, num_programs=3, heads_per_work=16)
    check(case, plan, causal=True, config={"BLOCK_N": block_n})


def test_folded_h32_plan() -> None:
    case = make_case([30, 50], q_len=2, num_heads=32, page_size=16, seed=3)
    s, ratio = 2, 2
    tiles = [
        Tile(vb, vb * s, (vb + 1) * s, cuts)
        for vb, cuts in zip(range(4), [(1,), (), (2,), (1, 3)], strict=True)
    ]
    plan = hand_plan(case, tiles, num_programs=4, heads_per_work=16, fold_ratio=ratio)
    check(case, plan, causal=True)


# The Triton kernel even where the Gluon decode would take the launch (e4m3 q and KV on Hopper:
# tests/selftest/kernels/test_gluon_mla.py checks that kernel, with its fp8 MMA's error).
TRITON = {"GLUON": 0}


@pytest.mark.skipif(FP8 is None, reason="torch has no float8_e4m3fn")
@pytest.mark.parametrize("q_fp8", [False, True], ids=["q-bf16", "q-fp8"])
def test_fp8_kv_with_scale(q_fp8: bool) -> None:
    case = make_case(
        [45, 12, 30], q_len=1, num_heads=16, page_size=16, seed=4, kv_dtype=FP8, kv_scale=0.5,
        q_dtype=FP8 if q_fp8 else torch.bfloat16, q_scale=0.25 if q_fp8 else 1.0,
    )  # fmt: skip
    tiles = unfolded_tiles(case, {0: (1,), 2: (1,)})
    plan = hand_plan(case, tiles, num_programs=4, heads_per_work=16)
    check(case, plan, causal=True, fp8_p=False, config=TRITON)


@pytest.mark.skipif(FP8 is None, reason="torch has no float8_e4m3fn")
def test_fp8_q_rounds_p_to_e4m3_by_default() -> None:
    # AITER's fp8-q rule: P is rounded to e4m3 (relative error < 2⁻³, one ulp) before P @ V.
    case = make_case([45, 30], q_len=1, num_heads=16, page_size=16, seed=12, kv_dtype=FP8,
                     kv_scale=0.5, q_dtype=FP8, q_scale=0.25)  # fmt: skip
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=16)
    rounded = check(case, plan, causal=True, p_rel_err=2.0**-3, config=TRITON)
    unrounded, _ = run(case, plan, fp8_p=False, config=TRITON)
    assert (rounded - unrounded).abs().max() > 1e-3, "fp8_p=None with fp8 q did not round P"


def test_tile_larger_than_block_m_and_qo_split() -> None:
    # 5 q tokens × 16 heads = 80 rows in one tile: two BLOCK_M=64 chunks per work.
    case = make_case([26, 40], q_len=5, num_heads=16, page_size=16, seed=5)
    plan = hand_plan(case, unfolded_tiles(case, {1: (1,)}), num_programs=2, heads_per_work=16)
    check(case, plan, causal=True)


def test_non_power_of_two_heads_one_token_per_tile() -> None:
    # 48 heads, q_len 2, one q token per tile (qo splitting), both tiles kv-split.
    case = make_case([21, 34], q_len=2, num_heads=48, page_size=16, seed=6)
    tiles = [Tile(b, t, t + 1, (1,)) for b in range(2) for t in (2 * b, 2 * b + 1)]
    plan = hand_plan(case, tiles, num_programs=3, heads_per_work=48)
    check(case, plan, causal=True)


PLANNER_CASES = [
    # (arch, heads, q_len, page_size, kv_lens, num_cus): triton native 16 and folded 128
    # (2 × 64 heads), gfx942 folded 32 (2 × 16 heads, 2 tokens × 16 heads per tile).
    ("triton", 16, 2, 16, [70, 23, 41], 5),
    ("triton", 128, 1, 1, [50, 19], 3),
    ("gfx942", 32, 2, 1, [40, 33], 4),
]


@pytest.mark.parametrize(
    ("arch", "heads", "q_len", "page_size", "kv_lens", "num_cus"),
    PLANNER_CASES,
    ids=[f"{c[0]}-h{c[1]}-s{c[2]}-p{c[3]}" for c in PLANNER_CASES],
)
def test_planner_made_plans(
    arch: str, heads: int, q_len: int, page_size: int, kv_lens: list[int], num_cus: int
) -> None:
    pytest.importorskip("conformance.persistent.planner", reason="planner not available")
    case = make_case(kv_lens, q_len=q_len, num_heads=heads, page_size=page_size, seed=13)
    plan = planned(case, arch=arch, num_cus=num_cus)
    assert plan.num_partials > 0, f"the {arch} plan has no split works; the case tests nothing"
    check(case, plan, causal=True)


def test_reduce_is_neg_inf_safe() -> None:
    hpw, rows = 16, 6
    gen = torch.Generator().manual_seed(11)
    part_o = torch.randn(rows, hpw, 512, generator=gen)
    part_lse = torch.randn(rows, hpw, generator=gen)
    part_lse[:, :2] = float("-inf")  # heads 0-1: every split masked → O = 0, lse = −inf
    part_lse[0:2, 2:4] = float("-inf")  # heads 2-3: split 0 masked, its O is garbage
    part_o[:, :4] = float("nan")
    part_o[2:, 2:4] = torch.randn(4, 2, 512, generator=gen)
    # Tile 0: three splits at rows 0, 2, 4 → final rows [0, 2). Tile 1: a size-1 group (here
    # with partial row −1, AITER v1.0's marker of an unsplit batch) → skipped, row 2 untouched.
    plan = WorkPlan(
        work_indptr=torch.tensor([0, 0], dtype=torch.int32),
        work_info_set=torch.zeros(1, 8, dtype=torch.int32),
        reduce_indptr=torch.tensor([0, 3, 4, 4], dtype=torch.int32),
        reduce_final_map=torch.tensor([[0, 2], [2, 3], [-1, -2]], dtype=torch.int32),
        reduce_partial_map=torch.tensor([0, 2, 4, -1], dtype=torch.int32),
        num_works=0, num_partials=4, num_tiles=3, heads_per_work=hpw, max_seqlen_qo=2,
    )  # fmt: skip
    out = torch.full((3, hpw, 512), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    lse = torch.full((3, hpw), float("nan"), dtype=torch.float32, device=DEVICE)
    tm.mla_reduce(part_o.to(DEVICE), part_lse.to(DEVICE), plan.to(DEVICE), out, lse)
    got_o, got_lse = out.double().cpu(), lse.double().cpu()
    assert torch.isnan(got_lse[2]).all() and torch.isnan(got_o[2]).all(), "size-1 group ran"
    got_o, got_lse = got_o[:2], got_lse[:2]
    lse_k = part_lse.double().reshape(3, 2, hpw)
    o_k = part_o.double().reshape(3, 2, hpw, 512)
    ref_lse = torch.logsumexp(lse_k, dim=0)
    weights = torch.nan_to_num(torch.exp(lse_k - ref_lse), nan=0.0)
    ref_o = (weights[..., None] * torch.nan_to_num(o_k, nan=0.0)).sum(0)
    assert torch.isneginf(got_lse[:, :2]).all() and (got_o[:, :2] == 0).all()
    assert torch.isfinite(got_o).all() and torch.isfinite(got_lse[:, 2:]).all()
    assert (got_lse[:, 2:] - ref_lse[:, 2:]).abs().max() < 1e-5
    tol = BF16_REL_ERR * ref_o.abs() + 1e-5
    assert ((got_o - ref_o).abs() <= tol).all()


# --------------------------------------------------------------------------------------------
# Negative controls: each deliberately broken kernel must be rejected by the checks above.
# --------------------------------------------------------------------------------------------


def test_negative_control_read_past_end_is_caught_by_nan_poisoning() -> None:
    case = make_case([40, 17], q_len=1, num_heads=16, page_size=16, seed=7)
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=16)
    out, _ = run(case, plan, _fault="read_past_end")
    assert torch.isnan(out).any(), "reading past kv_end should have pulled NaN slots in"
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, _fault="read_past_end")


@pytest.mark.skipif(FP8 is None, reason="torch has no float8_e4m3fn")
def test_negative_control_dropped_kv_scale_is_caught() -> None:
    case = make_case([30, 20], q_len=1, num_heads=16, page_size=16, seed=8, kv_dtype=FP8,
                     kv_scale=0.5)  # fmt: skip
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=16)
    with pytest.raises(AssertionError, match=r"exceeds tolerance|lse - ref"):
        check(case, plan, _fault="drop_kv_scale")


def test_negative_control_reduce_skipping_a_partial_is_caught() -> None:
    case = make_case([37, 40], q_len=1, num_heads=16, page_size=1, seed=9)
    plan = hand_plan(case, unfolded_tiles(case, {0: (16,), 1: (8, 24)}), num_programs=3,
                     heads_per_work=16)  # fmt: skip
    with pytest.raises(AssertionError, match=r"exceeds tolerance|lse - ref"):
        check(case, plan, _fault="skip_partial")


def test_unknown_fault_is_rejected() -> None:
    case = make_case([4], q_len=1, num_heads=16, page_size=1, seed=10)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=1, heads_per_work=16)
    with pytest.raises(ValueError, match="_fault must be one of"):
        run(case, plan, _fault="no_such_fault")
