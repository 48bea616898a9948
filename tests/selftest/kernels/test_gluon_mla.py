"""Self-tests of the Hopper decodes in Gluon (kernels/gluon_mla/), on an sm_90 GPU only.

The cases of test_triton_mla.py's error model (fp64 reference, NaN-poisoned cache), each run
on both Gluon kernels — the two-warpgroup decode (`decode_kernel`) and the warp-specialized
one (`ws_kernel`), in every tile configuration of each — over bf16 q and KV (64 packed rows)
and over e4m3 q and KV (up to 64 rows, padded): page sizes 1, 16 and 64, split and unsplit
works, blocks of 1 to 18 tiles several to a program, causal q_len 4 with packed rows and a
masked split, folded and head-group plans, planner-made plans, scales in memory, e4m3-rounded
P. The narrow decode (`narrow_kernel`: e4m3 blocks of 16 or 32 rows, tokens on the MMA rows)
in its tile configurations at one and two warpgroups: 16 and 32 rows, q_len 2 causal, page
sizes 1, 16 and 64, long works, scales in memory, head groups, a planner-made plan, and a
64-row launch that names it but takes the two-warpgroup decode. Each test spies on the launch
and fails unless the kernel its config names ran on its cache's dtype. The default launch
takes the kernel `kernels.triton_mla` names for it. Negative controls: the broken variants
(read past the end, dropped kv_scale, an idle head group) of every kernel at each of its
dtypes are caught.
"""

from __future__ import annotations

import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

_CASES = runpy.run_path(str(Path(__file__).with_name("triton_cases.py")))
NAMES = (
    "E4M3_P_REL_ERR FP8 check check_fp8 fp8_case fp8_mma_score_err hand_plan hopper_only "
    "make_case planned run spy_gluon_kernel tm unfolded_tiles"
)
(
    E4M3_P_REL_ERR, FP8, check, check_fp8, fp8_case, fp8_mma_score_err, hand_plan, hopper_only,
    make_case, planned, run, spy_gluon_kernel, tm, unfolded_tiles,
) = (_CASES[name] for name in NAMES.split())  # fmt: skip

pytestmark = hopper_only()
needs_fp8 = pytest.mark.skipif(FP8 is None, reason="torch has no float8_e4m3fn")

# A launch config names its kernel: the two-warpgroup decode (8 warps) or, with WS, the
# warp-specialized one (3 partitions of 4 warps); what it leaves out comes from the kernel's
# table (kernels.triton_mla HOPPER_CONFIGS, WS_CONFIGS).
WG = {"GLUON": 1, "num_warps": 8}
WS = {"GLUON": 1, "WS": 1, "num_warps": 4}
NARROW = {"GLUON": 1, "NARROW": 1, "num_warps": 4}  # e4m3 blocks of 16 or 32 rows


def tiles(kernel: dict, *shapes: tuple[int, int]) -> list[dict]:
    """`kernel`'s config at each (BLOCK_N, STAGES)."""
    return [kernel | {"BLOCK_N": n, "STAGES": stages} for n, stages in shapes]


BF16_CONFIGS = tiles(WG, (64, 2), (32, 3), (32, 4)) + tiles(WS, (32, 4), (64, 2), (32, 2))
# e4m3 WS: six stages (the loader widens a tile's V while the next four tiles' copies run),
# three (one) and two (it widens each tile before it copies the next); 32-token tiles.
FP8_CONFIGS = tiles(WG, (64, 3), (64, 2)) + tiles(WS, (32, 6), (32, 3), (32, 2))
KERNELS = [WG, WS]  # each kernel in its table's configuration
# 64-token tiles in 3 or 2 stages (4 do not fit beside V and O's turn back to rows)
NARROW_CONFIGS = tiles(NARROW, (64, 3), (64, 2)) + tiles(NARROW | {"num_warps": 8}, (64, 3))


def config_id(config: dict) -> str:
    kernel = "ws" if config.get("WS") else "narrow" if config.get("NARROW") else "wg"
    if config.get("NARROW") and config["num_warps"] == 8:
        kernel += "-w8"
    if "BLOCK_N" not in config:
        return kernel
    return f"{kernel}-n{config['BLOCK_N']}-s{config['STAGES']}"


def ran(config: dict, dtype: torch.dtype | None = torch.bfloat16) -> tuple[object, bool, bool]:
    """What the spy records for a launch of `config` over a cache of `dtype`."""
    return dtype, bool(config.get("WS")), bool(config.get("NARROW"))


def long_works(make: Callable[..., Any], seed: int) -> tuple[Any, Any]:
    """Blocks of 1 to 18 tiles, several works a program (64 heads): the WS consumers'
    hand-overs, the tile owner alternating across blocks, the barrier phases and the e4m3
    loader's widening lag carried from block to block."""
    case = make([64, 128, 190, 260, 320, 64 * 7 + 3, 512, 575], q_len=1, num_heads=64,
                page_size=64, seed=seed)  # fmt: skip
    return case, hand_plan(case, unfolded_tiles(case, {4: (2,)}), num_programs=3,
                           heads_per_work=64)  # fmt: skip


def causal_q4(make: Callable[..., Any], seed: int) -> tuple[Any, Any]:
    """4 q tokens x 16 heads = 64 packed rows; b1's split leaves q row 0 one token short of its
    last fragment (an all -inf partial); b3 has 2 tokens, so rows of q 0 and 1 see nothing."""
    case = make([70, 17, 45, 2], q_len=4, num_heads=16, page_size=16, seed=seed)
    return case, hand_plan(case, unfolded_tiles(case, {0: (2,), 1: (1,)}), num_programs=3,
                           heads_per_work=16)  # fmt: skip


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.dtype, bool, bool]]:
    """(cache dtype, warp-specialized, narrow) of each Gluon launch: a test asserts the kernel
    it tests ran."""
    return spy_gluon_kernel(monkeypatch, lambda kv_dtype, ws, narrow: (kv_dtype, ws, narrow))


# --------------------------------------------------------------------------------------------
# bf16 q and KV
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", BF16_CONFIGS, ids=config_id)
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_h64_split_and_unsplit_works(page_size: int, config: dict, launches) -> None:
    # 64 heads, four requests, two of them split (one at two cuts), five programs.
    case = make_case([150, 37, 300, 5], q_len=1, num_heads=64, page_size=page_size, seed=21)
    cut = max(1, 96 // page_size)
    tiles = unfolded_tiles(case, {0: (cut,), 2: (cut, 2 * cut)})
    check(case, hand_plan(case, tiles, num_programs=5, heads_per_work=64), config=config)
    assert launches == [ran(config)], "not the kernel the config names"


@pytest.mark.parametrize("config", BF16_CONFIGS, ids=config_id)
def test_long_works_odd_and_even_tile_counts(config: dict, launches) -> None:
    case, plan = long_works(make_case, seed=29)
    check(case, plan, config=config)
    assert launches == [ran(config)]


@pytest.mark.parametrize("config", BF16_CONFIGS, ids=config_id)
def test_causal_q4_packed_rows_and_masked_split(config: dict, launches) -> None:
    case, plan = causal_q4(make_case, seed=22)
    check(case, plan, causal=True, config=config)
    check(case, plan, causal=False, config=config)
    assert launches == [ran(config)] * 2


@pytest.mark.parametrize("config", KERNELS, ids=config_id)
def test_folded_h128_planner_plan_and_head_groups(config: dict, launches) -> None:
    case = make_case([200, 31, 90], q_len=1, num_heads=128, page_size=16, seed=23)
    plan = planned(case, arch="triton", num_cus=4)  # 2 x 64 heads, folded
    assert plan.fold_ratio == 2 and plan.num_partials > 0
    check(case, plan, config=config)
    check(case, plan, config=config | {"SPLIT_GROUPS": 1})
    check(case, plan, config=config | {"PAIR_GROUPS": 1})
    grouped = hand_plan(case, unfolded_tiles(case, {0: (3,)}), num_programs=2, heads_per_work=64)
    check(case, grouped, config=config)  # a 64-head plan, run for both head groups
    assert launches == [ran(config)] * 4, "the kernel did not take every launch"


@pytest.mark.parametrize("config", KERNELS, ids=config_id)
def test_kv_scale_in_memory_and_e4m3_p(config: dict, launches) -> None:
    case = make_case([80, 33], q_len=1, num_heads=64, page_size=64, seed=24, kv_scale=0.5)
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=64)
    by_value = check(case, plan, config=config)
    scale = torch.tensor([case.kv_scale], device=case.q.device)
    in_memory, _ = run(case, plan, config=config, kv_scale=scale)
    assert torch.equal(in_memory.double().cpu(), by_value), "a kv_scale tensor changed O"
    rounded = check(case, plan, fp8_p=True, p_rel_err=E4M3_P_REL_ERR, config=config)
    plain, _ = run(case, plan, fp8_p=False, config=config)
    assert (rounded - plain.double().cpu()).abs().max() > 1e-3, "fp8_p=True did not round P"
    assert launches == [ran(config)] * 4


def test_default_launch_takes_the_tables_kernel_and_triton_stays_selectable(launches) -> None:
    case = make_case([64, 20], q_len=1, num_heads=64, page_size=16, seed=25)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    check(case, plan)  # no config
    check(case, plan, config={"BLOCK_N": 64})  # a config without WS: the two-warpgroup kernel
    check(case, plan, config={"GLUON": 0})  # the Triton kernel
    default = (torch.bfloat16, "bf16" in tm.WS_BY_DEFAULT, False)
    assert launches == [default, (torch.bfloat16, False, False)], launches


# --------------------------------------------------------------------------------------------
# e4m3 q and KV
# --------------------------------------------------------------------------------------------


# (config, heads, q_len): the padded kernels at 64 and 16 heads; the narrow one at 16 and 32
# rows (16 heads, and 8 or 16 heads x 2 q tokens, causal)
FP8_SHAPES = [
    pytest.param(config, heads, q_len, id=f"{config_id(config)}-h{heads}-q{q_len}")
    for configs, shapes in ((FP8_CONFIGS, [(64, 1), (16, 1)]),
                            (NARROW_CONFIGS, [(16, 1), (8, 2), (16, 2)]))
    for config in configs
    for heads, q_len in shapes
]  # fmt: skip


@needs_fp8
@pytest.mark.parametrize(("config", "num_heads", "q_len"), FP8_SHAPES)
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_fp8_split_and_unsplit_works(
    num_heads: int, q_len: int, page_size: int, config: dict, launches
) -> None:
    # 16 heads: 16 rows padded to one 64-row block, or a narrow block. Tiles past 64 tokens,
    # split works.
    case = fp8_case([150, 37, 300, 5], q_len=q_len, num_heads=num_heads, page_size=page_size,
                    seed=41)  # fmt: skip
    cut = max(1, 96 // page_size)
    tiles = unfolded_tiles(case, {0: (cut,), 2: (cut, 2 * cut)})
    plan = hand_plan(case, tiles, num_programs=5, heads_per_work=num_heads)
    rounded = check_fp8(case, plan, config=config)
    plain = check_fp8(case, plan, config=config, fp8_p=False)
    assert (rounded - plain).abs().max() > 1e-3, "P was not rounded to e4m3 by default"
    assert launches == [ran(config, FP8)] * 2, "not the fp8 kernel the config names"


@needs_fp8
@pytest.mark.parametrize("config", FP8_CONFIGS, ids=config_id)
def test_fp8_long_works_and_causal_q4(config: dict, launches) -> None:
    case, plan = long_works(fp8_case, seed=45)
    check_fp8(case, plan, config=config)
    case, plan = causal_q4(fp8_case, seed=42)
    for causal in (True, False):
        check_fp8(case, plan, causal=causal, config=config)
    assert launches == [ran(config, FP8)] * 3


@needs_fp8
@pytest.mark.parametrize("config", KERNELS, ids=config_id)
def test_fp8_folded_h128_planner_plan_head_groups_and_scales_in_memory(
    config: dict, launches
) -> None:
    case = fp8_case([200, 31, 90], q_len=1, num_heads=128, page_size=16, seed=43)
    plan = planned(case, arch="triton", num_cus=4)  # 2 x 64 heads, folded
    assert plan.fold_ratio == 2 and plan.num_partials > 0
    by_value = check_fp8(case, plan, config=config)
    check_fp8(case, plan, config=config | {"SPLIT_GROUPS": 1})
    check_fp8(case, plan, config=config | {"PAIR_GROUPS": 1})
    grouped = hand_plan(case, unfolded_tiles(case, {0: (3,)}), num_programs=2, heads_per_work=64)
    check_fp8(case, grouped, config=config)
    scales = {"q_scale": torch.tensor([0.25]), "kv_scale": torch.tensor([0.5])}
    in_memory, _ = run(case, plan, config=config,
                       **{k: v.to(case.q.device) for k, v in scales.items()})  # fmt: skip
    assert torch.equal(in_memory.double().cpu(), by_value), "scale tensors changed O"
    assert launches == [ran(config, FP8)] * 5, "the kernel did not take every launch"


@needs_fp8
def test_fp8_default_dispatch_follows_the_tables(launches) -> None:
    case = fp8_case([64, 20], q_len=1, num_heads=64, page_size=16, seed=44)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    check_fp8(case, plan)  # no config
    if "fp8" in tm.WS_BY_DEFAULT:
        expected = [(FP8, True, False)]
    else:
        expected = [(FP8, False, False)] if (64, "fp8") in tm.HOPPER_CONFIGS else []
    assert launches == expected, "not the WS_BY_DEFAULT / HOPPER_CONFIGS choice"
    check_fp8(case, plan, config={"WS": 1})  # the rest from WS_CONFIGS["fp8"]
    check_fp8(case, plan, config={"GLUON": 0})  # the Triton kernel
    bf16_q = make_case([64, 20], q_len=1, num_heads=64, page_size=16, seed=44, kv_dtype=FP8,
                       kv_scale=0.5)  # fmt: skip
    check(bf16_q, plan, config=FP8_CONFIGS[0], fp8_p=False)  # bf16 q over e4m3: Triton
    assert launches == [*expected, (FP8, True, False)], "bf16 q over e4m3 KV took a Gluon kernel"


# --------------------------------------------------------------------------------------------
# e4m3 q and KV in narrow blocks (16 or 32 rows): tokens on the MMA rows
# --------------------------------------------------------------------------------------------


@needs_fp8
@pytest.mark.parametrize("config", NARROW_CONFIGS, ids=config_id)
def test_narrow_long_works_causal_and_scales_in_memory(config: dict, launches) -> None:
    # blocks of 1 to 18 tiles, several works a program; 2 q tokens x 16 heads, causal
    case = fp8_case([64, 128, 190, 260, 320, 64 * 7 + 3, 512, 575], q_len=2, num_heads=16,
                    page_size=64, seed=52)  # fmt: skip
    plan = hand_plan(case, unfolded_tiles(case, {4: (2,)}), num_programs=3, heads_per_work=16)
    by_value = check_fp8(case, plan, config=config)
    check_fp8(case, plan, causal=False, config=config)
    scales = {"q_scale": torch.tensor([0.25]), "kv_scale": torch.tensor([0.5])}
    in_memory, _ = run(case, plan, config=config,
                       **{k: v.to(case.q.device) for k, v in scales.items()})  # fmt: skip
    assert torch.equal(in_memory.double().cpu(), by_value), "scale tensors changed O"
    assert launches == [ran(config, FP8)] * 3


@needs_fp8
def test_narrow_head_groups_and_planner_plan(launches) -> None:
    # 32 heads: a 16-head plan run once per head group, and the planner's plan (32 rows)
    case = fp8_case([200, 31, 90], q_len=1, num_heads=32, page_size=16, seed=53)
    grouped = hand_plan(case, unfolded_tiles(case, {0: (3,)}), num_programs=2, heads_per_work=16)
    check_fp8(case, grouped, config=NARROW)
    check_fp8(case, planned(case, arch="triton", num_cus=4), config=NARROW)
    wide = fp8_case([70, 20], q_len=1, num_heads=64, page_size=16, seed=53)
    plan = hand_plan(wide, unfolded_tiles(wide, {}), num_programs=2, heads_per_work=64)
    # 64 rows: NARROW is ignored, the two-warpgroup decode runs at its table's warps (a config
    # that also names 4 warps compiles it at 4, fails, and falls back to the Triton kernel)
    check_fp8(wide, plan, config={"GLUON": 1, "NARROW": 1})
    assert launches == [ran(NARROW, FP8)] * 2 + [ran(WG, FP8)], launches
    from kernels import gluon_mla

    assert gluon_mla.disabled_reason() is None, "the 64-row launch did not compile"


@needs_fp8
def test_narrow_default_dispatch_follows_the_tables(launches) -> None:
    case = fp8_case([64, 20], q_len=1, num_heads=16, page_size=16, seed=54)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=16)
    check_fp8(case, plan)  # no config
    if 16 in tm.NARROW_BY_DEFAULT:
        expected = [ran(NARROW, FP8)]
    else:
        expected = [ran(WG, FP8)] if (16, "fp8") in tm.HOPPER_CONFIGS else []
    assert launches == expected, "not the NARROW_BY_DEFAULT / HOPPER_CONFIGS choice"


# --------------------------------------------------------------------------------------------
# Negative controls (both kernels, both dtypes)
# --------------------------------------------------------------------------------------------

KINDS = [
    pytest.param(kind, config, id=f"{kind}-{config_id(config)}", marks=marks)
    for kind, marks in (("bf16", ()), ("fp8", needs_fp8))
    for config in KERNELS
] + [pytest.param("fp8", NARROW, id="fp8-narrow", marks=needs_fp8)]


def _heads(config: dict) -> int:
    """Heads a work of the negative controls: one block of `config`'s kernel."""
    return 16 if config.get("NARROW") else 64


def _kind_case(kind: str, config: dict, kv_lens: list[int], **kwargs: object):
    """(a case of `kind`, the `check` keywords that run `config`'s kernel at its tolerance)."""
    if kind == "fp8":
        case = fp8_case(kv_lens, **kwargs)
        tol = {"p_rel_err": E4M3_P_REL_ERR, "score_err": fp8_mma_score_err(case)}
        return case, {"config": config, **tol}
    return make_case(kv_lens, **kwargs), {"config": config}


@pytest.mark.parametrize(("kind", "config"), KINDS)
def test_negative_control_read_past_end(kind: str, config: dict, launches) -> None:
    heads = _heads(config)
    case, how = _kind_case(kind, config, [40, 17], q_len=1, num_heads=heads, page_size=16,
                           seed=26)  # fmt: skip
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=heads)
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, **how, _fault="read_past_end")
    assert launches == [ran(config, case.kv_cache.dtype)]


@pytest.mark.parametrize(("kind", "config"), KINDS)
def test_negative_control_dropped_kv_scale(kind: str, config: dict, launches) -> None:
    heads = _heads(config)
    case, how = _kind_case(kind, config, [30, 20], q_len=1, num_heads=heads, page_size=16,
                           seed=27, kv_scale=0.5)  # fmt: skip
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=heads)
    check(case, plan, **how)  # the same case and tolerance pass unbroken
    with pytest.raises(AssertionError, match=r"exceeds tolerance|lse - ref"):
        check(case, plan, **how, _fault="drop_kv_scale")
    assert launches == [ran(config, case.kv_cache.dtype)] * 2


@pytest.mark.parametrize(("kind", "config"), KINDS)
def test_negative_control_idle_head_group(kind: str, config: dict, launches) -> None:
    heads = _heads(config)
    case, how = _kind_case(kind, config, [50, 20], q_len=1, num_heads=2 * heads, page_size=16,
                           seed=28)  # fmt: skip
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=heads)
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, **how, _fault="skip_head_group")
    assert launches == [ran(config, case.kv_cache.dtype)]
