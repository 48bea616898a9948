"""Self-tests of the Hopper decode in Gluon (kernels/gluon_mla/), on an sm_90 GPU only.

The cases of test_triton_mla.py's error model (fp64 reference, NaN-poisoned cache), on
launches the Gluon kernel takes (64 packed rows, bf16 q and KV): page sizes 1, 16 and 64,
causal q_len 2 and 4, split works, folded and head-group plans, planner-made plans, a
kv_scale in memory, e4m3-rounded P; every tile configuration of the kernel. Each test spies
on the launch and fails unless the Gluon kernel ran. Negative controls: the broken variants
(read past the end, dropped kv_scale, an idle head group) are caught.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

_CASES = runpy.run_path(str(Path(__file__).with_name("triton_cases.py")))
NAMES = "check hand_plan make_case planned run tm unfolded_tiles"
check, hand_plan, make_case, planned, run, tm, unfolded_tiles = (
    _CASES[name] for name in NAMES.split()
)

from kernels import gluon_mla  # noqa: E402

ON_HOPPER = (
    torch.cuda.is_available()
    and torch.version.hip is None
    and torch.cuda.get_device_capability()[0] == 9
)
pytestmark = [
    pytest.mark.skipif(not ON_HOPPER, reason="the Gluon decode needs an sm_90 (Hopper) GPU"),
    pytest.mark.skipif(
        not gluon_mla.gluon_importable(), reason="this Triton has no Gluon Hopper module"
    ),
]

_GLUON = {"GLUON": 1, "num_warps": 8}
CONFIGS = [
    _GLUON | {"BLOCK_N": 64, "STAGES": 2},
    _GLUON | {"BLOCK_N": 32, "STAGES": 3},
    _GLUON | {"BLOCK_N": 32, "STAGES": 4},
]
CONFIG_IDS = [f"n{c['BLOCK_N']}-s{c['STAGES']}" for c in CONFIGS]


@pytest.fixture
def gluon_launches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the Gluon kernel's launches (a test asserts the kernel it tests ran)."""
    calls: list[int] = []
    real = gluon_mla.kernel

    def spy():
        calls.append(1)
        return real()

    monkeypatch.setattr(gluon_mla, "kernel", spy)
    return calls


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_h64_split_and_unsplit_works(page_size: int, config: dict, gluon_launches) -> None:
    case = make_case([150, 37, 300, 5], q_len=1, num_heads=64, page_size=page_size, seed=21)
    cut = max(1, 96 // page_size)
    tiles = unfolded_tiles(case, {0: (cut,), 2: (cut, 2 * cut)})
    plan = hand_plan(case, tiles, num_programs=5, heads_per_work=64)
    check(case, plan, causal=True, config=config)
    assert gluon_launches, "the Gluon kernel did not run"


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_causal_q4_packed_rows_and_masked_split(config: dict, gluon_launches) -> None:
    # 4 q tokens x 16 heads = 64 rows; b1's split leaves q row 0 one token short of its last
    # fragment (an all -inf partial); b3 has 2 tokens, so rows of q 0 and 1 see nothing.
    case = make_case([70, 17, 45, 2], q_len=4, num_heads=16, page_size=16, seed=22)
    plan = hand_plan(case, unfolded_tiles(case, {0: (2,), 1: (1,)}), num_programs=3,
                     heads_per_work=16)  # fmt: skip
    check(case, plan, causal=True, config=config)
    check(case, plan, causal=False, config=config)
    assert gluon_launches, "the Gluon kernel did not run"


def test_folded_h128_planner_plan_and_head_groups(gluon_launches) -> None:
    case = make_case([200, 31, 90], q_len=1, num_heads=128, page_size=16, seed=23)
    plan = planned(case, arch="triton", num_cus=4)  # 2 x 64 heads, folded
    assert plan.fold_ratio == 2 and plan.num_partials > 0
    check(case, plan, causal=True)  # the default launch
    check(case, plan, causal=True, config={"SPLIT_GROUPS": 1})
    grouped = hand_plan(case, unfolded_tiles(case, {0: (3,)}), num_programs=2, heads_per_work=64)
    check(case, grouped, causal=True)  # one plan for 64 heads, run for both head groups
    assert len(gluon_launches) == 3, "the Gluon kernel did not take every launch"


def test_kv_scale_in_memory_and_e4m3_p(gluon_launches) -> None:
    case = make_case([80, 33], q_len=1, num_heads=64, page_size=64, seed=24, kv_scale=0.5)
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=64)
    by_value = check(case, plan, causal=True)
    kwargs = case.launch_kwargs() | {"kv_scale": torch.tensor([0.5], device=case.q.device)}
    in_memory, _ = tm.persistent_mla_decode(case.q, case.kv_cache, plan, causal=True, **kwargs)
    assert torch.equal(in_memory.double().cpu(), by_value), "a kv_scale tensor changed O"
    rounded = check(case, plan, causal=True, fp8_p=True, p_rel_err=2.0**-3)
    plain, _ = run(case, plan, fp8_p=False)
    assert (rounded - plain).abs().max() > 1e-3, "fp8_p=True did not round P"
    assert len(gluon_launches) == 4


def test_default_launch_is_gluon_and_triton_stays_selectable(gluon_launches) -> None:
    case = make_case([64, 20], q_len=1, num_heads=64, page_size=16, seed=25)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    check(case, plan, causal=True)
    assert len(gluon_launches) == 1, "the default 64-row bf16 launch is not the Gluon kernel"
    check(case, plan, causal=True, config={"GLUON": 0})
    assert len(gluon_launches) == 1, "GLUON: 0 did not select the Triton kernel"


# --------------------------------------------------------------------------------------------
# Negative controls
# --------------------------------------------------------------------------------------------


def test_negative_control_read_past_end(gluon_launches) -> None:
    case = make_case([40, 17], q_len=1, num_heads=64, page_size=16, seed=26)
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=64)
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, _fault="read_past_end")
    assert gluon_launches


def test_negative_control_dropped_kv_scale(gluon_launches) -> None:
    case = make_case([30, 20], q_len=1, num_heads=64, page_size=16, seed=27, kv_scale=0.5)
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=64)
    with pytest.raises(AssertionError, match=r"exceeds tolerance|lse - ref"):
        check(case, plan, _fault="drop_kv_scale")
    assert gluon_launches


def test_negative_control_idle_head_group(gluon_launches) -> None:
    case = make_case([50, 20], q_len=1, num_heads=128, page_size=16, seed=28)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, _fault="skip_head_group")
    assert gluon_launches
