"""Self-tests of the reference persistent-decode planner: worked examples, head layout, fuzz.

The worked examples are docs/planner.md's, checked against AITER's source
(``csrc/kernels/mla/metadata/v1_2_device.cuh``); buffer sizing is in test_sizing.py, bad input in
test_planner_errors.py.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

import pytest
import torch

from conformance.persistent import UNWRITTEN, plan_persistent_decode
from conformance.persistent.checks import PLANNER_KEYWORDS
from conformance.persistent.planner import plan_with_walk

from plancall import BF16, FP8_FN, FP8_FNUZ, invariants_of, plan_args, works_of

pytestmark = pytest.mark.selftest


# ---------------------------------------------------------------------------------------
# docs/planner.md's worked examples, exactly as written there


def test_worked_example_1_splits_and_wasted_program() -> None:
    args = plan_args([1, 1, 1], [1000, 50, 3000])
    plan = plan_persistent_decode(**args)
    assert plan.params["overhead"] == 16
    assert plan.params["sum_blocks"] == 303
    assert plan.params["payload"] == 54
    assert plan.work_indptr.tolist() == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    works = works_of(plan)
    assert works[:4] == [
        (0, 0, 0, 1, 0, 608, 392),
        (0, 1, 0, 1, 608, 1000, 0),
        (1, -1, 1, 2, 1000, 1050, 0),
        (2, 2, 2, 3, 1050, 1338, 2712),
    ]
    assert works[-1] == (2, 7, 2, 3, 3770, 4050, 0)
    # Works 4..7: each is one full program of 38 blocks (608 tokens).
    assert [(w[4], w[5]) for w in works[4:8]] == [
        (1338, 1946),
        (1946, 2554),
        (2554, 3162),
        (3162, 3770),
    ]
    assert plan.reduce_indptr.tolist() == [0, 2, 2, 8]
    assert plan.reduce_final_map[0].tolist() == [0, 1]
    assert plan.reduce_final_map[2].tolist() == [2, 3]
    assert plan.reduce_partial_map[: plan.num_partials].tolist() == list(range(8))
    assert (plan.num_works, plan.num_partials, plan.num_tiles) == (9, 8, 3)
    assert invariants_of(plan, args) == []


def test_worked_example_2_tail_rule_absorbs_short_tail() -> None:
    args = plan_args([4, 4], [577, 40], num_cus=4)
    plan = plan_persistent_decode(**args)
    assert plan.params["payload"] == 34
    assert plan.params["payload"] - plan.params["overhead"] == 18  # 18 blocks = 288 tokens
    assert works_of(plan) == [
        (0, 0, 0, 4, 0, 288, 289),
        (0, 4, 0, 4, 288, 577, 0),  # [288,576) would leave 1 token < 4: absorbed
        (1, -1, 4, 8, 577, 617, 0),  # batch 1 moves to program 2
    ]
    assert plan.work_indptr.tolist() == [0, 1, 2, 3, 3]
    assert plan.reduce_partial_map[: plan.num_partials].tolist() == [0, 4]
    assert plan.reduce_indptr.tolist() == [0, 2, 2]
    assert plan.reduce_final_map[0].tolist() == [0, 4]
    assert invariants_of(plan, args) == []


def test_worked_example_3_mtp_causal_trim() -> None:
    args = plan_args(
        [2, 2], [300, 40], num_heads_q=128, q_dtype=FP8_FNUZ, kv_dtype=FP8_FNUZ, num_cus=4
    )
    plan = plan_persistent_decode(**args)
    assert (plan.fold_ratio, plan.heads_per_work, plan.params["native"]) == (1, 128, True)
    assert works_of(plan) == [
        (0, -1, 0, 1, 0, 299, 1),
        (0, -1, 1, 2, 0, 300, 0),
        (1, -1, 2, 3, 300, 339, 1),
        (1, -1, 3, 4, 300, 340, 0),
    ]
    assert plan.work_indptr.tolist() == [0, 1, 2, 4, 4]
    assert plan.num_partials == 0
    assert plan.reduce_indptr.tolist() == [0] * 5
    assert invariants_of(plan, args) == []


def test_non_causal_plan_keeps_every_kv_token_per_tile() -> None:
    args = plan_args(
        [2, 2],
        [300, 40],
        num_heads_q=128,
        q_dtype=FP8_FNUZ,
        kv_dtype=FP8_FNUZ,
        num_cus=4,
        causal=False,
    )
    plan = plan_persistent_decode(**args)
    # a tile per q token, each over all of its request's kv tokens
    assert [(w[4], w[5], w[6]) for w in works_of(plan)] == [(0, 300, 0)] * 2 + [(300, 340, 0)] * 2


def test_page_16_kv_offset_counts_tokens_after_kv_end() -> None:
    # 40 pages (last holds 5 tokens) and 3 pages; granularity 16 pages; overhead 1 block.
    args = plan_args(
        [1, 1], [40, 3], [5, 8], page_size=16, kv_granularity=16, num_cus=4, causal=False
    )
    plan = plan_persistent_decode(**args)
    assert plan.params["overhead"] == 1
    assert plan.params["payload"] == 3
    assert works_of(plan) == [
        (0, 0, 0, 1, 0, 32, (40 - 32 - 1) * 16 + 5),
        (0, 1, 0, 1, 32, 40, 0),
        (1, -1, 1, 2, 40, 43, 0),
    ]
    assert plan.work_indptr.tolist() == [0, 1, 2, 3, 3]
    assert invariants_of(plan, args) == []


def test_max_split_per_batch_is_a_global_cap_on_programs() -> None:
    uncapped = plan_persistent_decode(**plan_args([1, 1], [5000, 5000], num_cus=8))
    capped = plan_persistent_decode(
        **plan_args([1, 1], [5000, 5000], num_cus=8, max_split_per_batch=1)
    )
    busy = lambda p: sum(1 for a, b in itertools.pairwise(p.work_indptr.tolist()) if b > a)  # noqa: E731
    assert busy(uncapped) == 8
    assert capped.params["num_splits"] == 2  # min(8, 1 * 2 batches)
    assert busy(capped) == 2
    assert capped.num_partials == 0  # each batch fills one program exactly


# ---------------------------------------------------------------------------------------
# Head layout, packed rows and qo tiling decisions


@pytest.mark.parametrize(
    ("arch", "heads", "sq", "q", "kv", "heads_per_work", "ratio", "tiles_per_batch"),
    [
        ("gfx942", 16, 1, BF16, BF16, 16, 1, 1),
        ("gfx942", 32, 1, BF16, BF16, 16, 2, 2),
        ("gfx942", 48, 2, BF16, BF16, 16, 3, 3),  # folded (48, 2): #2363
        ("gfx942", 128, 2, BF16, BF16, 16, 8, 8),
        ("gfx942", 128, 2, FP8_FNUZ, FP8_FNUZ, 128, 1, 2),  # native, one token per tile
        ("gfx942", 64, 1, FP8_FNUZ, FP8_FNUZ, 64, 1, 1),  # native only with S == 1
        ("gfx942", 64, 2, FP8_FNUZ, FP8_FNUZ, 16, 4, 4),
        ("gfx942", 128, 1, BF16, FP8_FNUZ, 16, 8, 8),  # bf16 q, fp8 kv: folded
        ("gfx950", 128, 1, BF16, BF16, 128, 1, 1),  # MI350 bf16 is native
        ("gfx950", 48, 4, BF16, BF16, 48, 1, 4),  # Pq 64, 2 * 48 > 64: a tile per token
        ("gfx950", 32, 3, FP8_FN, FP8_FN, 32, 1, 2),  # Pq 64: ceil(3 * 32 / 64)
        ("gfx950", 48, 1, FP8_FN, FP8_FN, 16, 3, 3),
        ("gfx950", 64, 1, BF16, FP8_FN, 16, 4, 4),
        ("triton", 16, 4, BF16, BF16, 16, 1, 1),  # 4 * 16 <= 64: no qo split
        ("triton", 32, 4, BF16, BF16, 32, 1, 2),  # ceil(4 * 32 / 64)
        ("triton", 48, 2, BF16, BF16, 48, 1, 2),  # 2 * 48 > 64: a tile per token
        ("triton", 128, 1, FP8_FN, FP8_FN, 64, 2, 2),
        ("triton", 128, 4, BF16, BF16, 64, 2, 8),
    ],
)
def test_head_layout_and_qo_tiles(
    arch: str,
    heads: int,
    sq: int,
    q: torch.dtype,
    kv: torch.dtype,
    heads_per_work: int,
    ratio: int,
    tiles_per_batch: int,
) -> None:
    args = plan_args(
        [sq] * 3, [700, 64, 2000], num_heads_q=heads, q_dtype=q, kv_dtype=kv, arch=arch
    )
    plan = plan_persistent_decode(**args)
    assert (plan.heads_per_work, plan.fold_ratio) == (heads_per_work, ratio)
    assert plan.num_tiles == 3 * tiles_per_batch
    assert {w.batch_idx for w in plan.works()} == set(range(3 * ratio))
    assert invariants_of(plan, args) == []


def test_folded_q_rows_are_virtual_rows() -> None:
    plan = plan_persistent_decode(**plan_args([2, 2], [100, 100], num_heads_q=32))
    assert plan.fold_ratio == 2
    # virtual batch b * 2 + g owns rows [2 * vb, 2 * vb + 2) of the folded q.
    assert sorted({(w.batch_idx, w.qo_start, w.qo_end) for w in plan.works()}) == [
        (0, 0, 2),
        (1, 2, 4),
        (2, 4, 6),
        (3, 6, 8),
    ]


def test_fp8_flavours_plan_alike_and_params_record_dtypes_as_strings() -> None:
    fnuz = plan_persistent_decode(
        **plan_args([1, 1], [900, 90], num_heads_q=64, q_dtype=FP8_FNUZ, kv_dtype=FP8_FNUZ)
    )
    fn = plan_persistent_decode(
        **plan_args([1, 1], [900, 90], num_heads_q=64, q_dtype=FP8_FN, kv_dtype=FP8_FN)
    )
    for name, value in fnuz.written_regions().items():
        assert torch.equal(value, fn.written_regions()[name]), name
    assert fnuz.params["q_dtype"] == "torch.float8_e4m3fnuz"
    assert fn.params["kv_dtype"] == "torch.float8_e4m3fn"
    for key in (
        "qo_indptr",
        "kv_indptr",
        "kv_last_page_lens",
        *(k for k in PLANNER_KEYWORDS if not k.endswith("_dtype")),
        "fold_ratio",
        "heads_per_work",
        "num_tiles",
    ):
        assert key in fn.params, key


def test_unwritten_entries_hold_the_sentinel() -> None:
    plan = plan_persistent_decode(**plan_args([1, 1, 1], [1000, 50, 3000]))
    assert (plan.work_info_set[plan.num_works :] == UNWRITTEN).all()
    assert (plan.reduce_partial_map[plan.num_partials :] == UNWRITTEN).all()
    assert plan.reduce_final_map[1].tolist() == [UNWRITTEN, UNWRITTEN]  # unsplit tile 1
    for tensor in (plan.work_indptr, plan.work_info_set, plan.reduce_indptr):
        assert tensor.dtype == torch.int32 and tensor.device.type == "cpu"


# ---------------------------------------------------------------------------------------
# Seeded fuzz: invariants hold, the fast walk equals the literal transcription


def tail_probe_case(rng: random.Random) -> dict[str, Any]:
    """One 16-head request on 8 programs whose j-th fragment end leaves 1..S-1 tokens.

    With kv = 16 * j * bpc + d tokens (d < S), v1.2's payload gives bpc blocks per
    program exactly when ``(8 - j) * bpc`` lies in [17, 24]; fragment j then ends one
    short block before the end and the tail rule (#2106) must absorb it.
    """
    sq = rng.randint(2, 4)
    j = rng.randint(1, 7)
    bpc = rng.randint(-(-17 // (8 - j)), 24 // (8 - j))
    tokens = 16 * j * bpc + rng.randint(1, sq - 1)
    q_dtype, kv_dtype = rng.choice([(BF16, BF16), (BF16, FP8_FNUZ), (FP8_FN, FP8_FN)])
    return {
        **plan_args([sq], [tokens], num_cus=8, q_dtype=q_dtype, kv_dtype=kv_dtype),
        "causal": rng.random() < 0.8,
        "max_split_per_batch": rng.choice([-1, 16, 32]),
        "arch": rng.choice(["gfx942", "gfx950", "triton"]),
    }


def random_case(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.1:
        return tail_probe_case(rng)
    batch = rng.randint(1, 64)
    sq = rng.randint(1, 4)
    heads = rng.choice([16, 32, 48, 64, 128])
    page = rng.choice([1, 16, 64])
    gran = max(page, 16) if rng.random() < 0.7 else rng.choice([1, 4, 16, 32, 64])
    causal = rng.random() < 0.8
    q_dtype, kv_dtype = rng.choice([(BF16, BF16), (BF16, FP8_FNUZ), (FP8_FN, FP8_FN)])
    ragged = heads == 16 and rng.random() < 0.3
    q_lens = [rng.randint(1, sq) if ragged else sq for _ in range(batch)]
    block_tokens = gran * page
    tokens = []
    for q in q_lens:
        kind = rng.random()
        if kind < 0.3:  # near a granularity / tail boundary
            t = block_tokens * rng.randint(1, 40) + rng.randint(-sq, sq)
        elif kind < 0.5:
            t = rng.randint(q, q + 40)
        else:
            t = rng.randint(q, 30000)
        if not causal and rng.random() < 0.05:
            t = 0  # empty kv: an empty work
        tokens.append(max(t, q) if causal else max(t, 0))
    pages = [-(-t // page) for t in tokens]
    last = [t - (p - 1) * page if p else 0 for t, p in zip(tokens, pages, strict=True)]
    return plan_args(
        q_lens,
        pages,
        last if page > 1 else None,
        num_heads_q=heads,
        max_seqlen_qo=sq,
        uni_seqlen_qo=-1 if ragged else sq,
        page_size=page,
        kv_granularity=gran,
        causal=causal,
        max_split_per_batch=rng.choice([-1, 1, 16, 32]),
        q_dtype=q_dtype,
        kv_dtype=kv_dtype,
        arch=rng.choice(["gfx942", "gfx950", "triton"]),
        num_cus=rng.choice([8, 80, 132, 256, 304]),
    )


def test_fuzz_invariants_hold_and_walks_agree() -> None:
    rng = random.Random(20260822)
    planned = 0
    started = time.perf_counter()
    for _ in range(250):
        args = random_case(rng)
        plan = plan_persistent_decode(**args)
        planned += 1
        violations = invariants_of(plan, args)
        assert violations == [], (args, [str(v) for v in violations[:5]])
        literal = plan_with_walk(**args, walk="literal")
        for name, region in plan.written_regions().items():
            assert torch.equal(region, literal.written_regions()[name]), (name, args)
    assert planned == 250
    assert time.perf_counter() - started < 30  # generous bound; typically ~2 s


def test_fuzz_hits_tail_rule_splits_and_folding() -> None:
    """The fuzz distribution reaches the behaviours it is meant to guard."""
    rng = random.Random(20260822)
    tails = splits = folded = 0
    for _ in range(250):
        args = random_case(rng)
        plan = plan_persistent_decode(**args)
        splits += plan.num_partials > 0
        folded += plan.fold_ratio > 1
        no_tail = plan_with_walk(**args, walk="literal", tail_rule=False)
        tails += not torch.equal(plan.work_info_set, no_tail.work_info_set)
    assert tails >= 15 and splits >= 50 and folded >= 50, (tails, splits, folded)


def test_large_batch_is_fast() -> None:
    rng = random.Random(7)
    kv = [rng.randint(4, 8192) for _ in range(1024)]
    args = plan_args([4] * 1024, kv, num_cus=304, max_split_per_batch=32)
    plan_persistent_decode(**args)
    best = min(_timed(lambda: plan_persistent_decode(**args)) for _ in range(5))
    assert best < 0.1  # ~2-5 ms measured; a loose bound for loaded CI machines


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
