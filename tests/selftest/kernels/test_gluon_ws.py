"""Self-tests of the warp-specialized Hopper decode (kernels/gluon_mla/ws_kernel.py), on an
sm_90 GPU only.

The cases the bf16 Gluon decode is tested on (test_gluon_mla.py: page sizes 1, 16 and 64,
split and unsplit works, causal q_len 4 with packed rows and a masked split, folded and
head-group plans, planner-made plans, a kv_scale in memory, e4m3-rounded P), launched with
``WS: 1``; each test fails unless the warp-specialized kernel ran. Negative controls: its
broken variants (read past the end, dropped kv_scale, an idle head group) are caught, and
the default launch takes it, a launch that names a config without ``WS`` does not.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

_CASES = runpy.run_path(str(Path(__file__).with_name("triton_cases.py")))
NAMES = (
    "causal_q4_case check folded_h128_case h64_split_case hand_plan hopper_only kv_scale_case "
    "kv_scale_in_memory make_case run spy_gluon_kernel tm unfolded_tiles"
)
(
    causal_q4_case, check, folded_h128_case, h64_split_case, hand_plan, hopper_only,
    kv_scale_case, kv_scale_in_memory, make_case, run, spy_gluon_kernel, tm, unfolded_tiles,
) = (_CASES[name] for name in NAMES.split())  # fmt: skip


pytestmark = hopper_only()

WS = {"GLUON": 1, "WS": 1, "BLOCK_N": 32, "STAGES": 4, "num_warps": 4}
WS_CONFIGS = [WS, WS | {"BLOCK_N": 64, "STAGES": 2}, WS | {"STAGES": 2}]
WS_IDS = [f"n{c['BLOCK_N']}-s{c['STAGES']}" for c in WS_CONFIGS]


@pytest.fixture
def ws_launches(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each Gluon launch, whether it took the warp-specialized kernel."""
    return spy_gluon_kernel(monkeypatch, lambda kv_dtype, ws: ws)


@pytest.mark.parametrize("config", WS_CONFIGS, ids=WS_IDS)
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_ws_h64_split_and_unsplit_works(page_size: int, config: dict, ws_launches) -> None:
    case, plan = h64_split_case(page_size)
    check(case, plan, causal=True, config=config)
    assert ws_launches == [True], "the warp-specialized kernel did not run"


@pytest.mark.parametrize("config", WS_CONFIGS, ids=WS_IDS)
def test_ws_long_works_odd_and_even_tile_counts(config: dict, ws_launches) -> None:
    # Blocks of 1 to 18 tiles, several works a program: the two consumers' hand-overs, the
    # tile owner alternating across blocks and the barrier phases carried from block to block.
    case = make_case([64, 128, 190, 260, 320, 64 * 7 + 3, 512, 575], q_len=1, num_heads=64,
                     page_size=64, seed=29)  # fmt: skip
    plan = hand_plan(case, unfolded_tiles(case, {4: (2,)}), num_programs=3, heads_per_work=64)
    check(case, plan, causal=True, config=config)
    assert ws_launches == [True]


@pytest.mark.parametrize("config", WS_CONFIGS, ids=WS_IDS)
def test_ws_causal_q4_packed_rows_and_masked_split(config: dict, ws_launches) -> None:
    case, plan = causal_q4_case()
    check(case, plan, causal=True, config=config)
    check(case, plan, causal=False, config=config)
    assert ws_launches == [True, True]


def test_ws_folded_h128_planner_plan_and_head_groups(ws_launches) -> None:
    case, plan, grouped = folded_h128_case()
    check(case, plan, causal=True, config=WS)
    check(case, plan, causal=True, config=WS | {"SPLIT_GROUPS": 1})
    check(case, grouped, causal=True, config=WS)
    assert ws_launches == [True] * 3, "the warp-specialized kernel did not take every launch"


def test_ws_kv_scale_in_memory_and_e4m3_p(ws_launches) -> None:
    case, plan = kv_scale_case()
    by_value = check(case, plan, causal=True, config=WS)
    in_memory = kv_scale_in_memory(case, plan, config=WS)
    assert torch.equal(in_memory, by_value), "a kv_scale tensor changed O"
    rounded = check(case, plan, causal=True, fp8_p=True, p_rel_err=2.0**-3, config=WS)
    plain, _ = run(case, plan, fp8_p=False, config=WS)
    assert (rounded - plain).abs().max() > 1e-3, "fp8_p=True did not round P"
    assert ws_launches == [True] * 4


def test_ws_is_chosen_where_the_launch_names_no_config(ws_launches) -> None:
    case = make_case([64, 20], q_len=1, num_heads=64, page_size=16, seed=25)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    check(case, plan, causal=True)  # no config: the warp-specialized decode
    check(case, plan, causal=True, config={"BLOCK_N": 64})  # a config: the Gluon decode
    assert ws_launches == [True, False], ws_launches


# Negative controls: the broken variants are caught on this kernel too.


def test_ws_negative_control_read_past_end(ws_launches) -> None:
    case = make_case([40, 17], q_len=1, num_heads=64, page_size=16, seed=26)
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=64)
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, config=WS, _fault="read_past_end")
    assert ws_launches == [True]


def test_ws_negative_control_dropped_kv_scale(ws_launches) -> None:
    case = make_case([30, 20], q_len=1, num_heads=64, page_size=16, seed=27, kv_scale=0.5)
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=64)
    check(case, plan, config=WS)  # the same case and tolerance pass unbroken
    with pytest.raises(AssertionError, match=r"exceeds tolerance|lse - ref"):
        check(case, plan, config=WS, _fault="drop_kv_scale")
    assert ws_launches == [True, True]


def test_ws_negative_control_idle_head_group(ws_launches) -> None:
    case = make_case([50, 20], q_len=1, num_heads=128, page_size=16, seed=28)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, config=WS, _fault="skip_head_group")
    assert ws_launches == [True]
