"""Self-tests of the Hopper decode in Gluon (kernels/gluon_mla/), on an sm_90 GPU only.

The cases of test_triton_mla.py's error model (fp64 reference, NaN-poisoned cache), on
launches the Gluon kernels take (64 packed rows of bf16 q and KV; up to 64 of e4m3 q and
KV): page sizes 1, 16 and 64, causal q_len 2 and 4, split works, folded and head-group plans,
planner-made plans, a kv_scale in memory, e4m3-rounded P; every tile configuration of each
kernel. Each test spies on the launch and fails unless the Gluon kernel of its cache's dtype
ran. Negative controls: the broken variants (read past the end, dropped kv_scale, an idle
head group) of both kernels are caught.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

_CASES = runpy.run_path(str(Path(__file__).with_name("triton_cases.py")))
NAMES = (
    "causal_q4_case check folded_h128_case fp8_mma_score_err h64_split_case hand_plan "
    "hopper_only kv_scale_case kv_scale_in_memory make_case planned run spy_gluon_kernel tm "
    "unfolded_tiles"
)
(
    causal_q4_case, check, folded_h128_case, fp8_mma_score_err, h64_split_case, hand_plan,
    hopper_only, kv_scale_case, kv_scale_in_memory, make_case, planned, run, spy_gluon_kernel,
    tm, unfolded_tiles,
) = (_CASES[name] for name in NAMES.split())  # fmt: skip

from kernels.triton_mla import HOPPER_CONFIGS  # noqa: E402

FP8 = getattr(torch, "float8_e4m3fn", None)

pytestmark = hopper_only()

_GLUON = {"GLUON": 1, "num_warps": 8}
CONFIGS = [
    _GLUON | {"BLOCK_N": 64, "STAGES": 2},
    _GLUON | {"BLOCK_N": 32, "STAGES": 3},
    _GLUON | {"BLOCK_N": 32, "STAGES": 4},
]
CONFIG_IDS = [f"n{c['BLOCK_N']}-s{c['STAGES']}" for c in CONFIGS]
FP8_CONFIGS = [_GLUON | {"BLOCK_N": 64, "STAGES": 3}, _GLUON | {"BLOCK_N": 64, "STAGES": 2}]
FP8_CONFIG_IDS = [f"n{c['BLOCK_N']}-s{c['STAGES']}" for c in FP8_CONFIGS]
E4M3_P_REL_ERR = 2.0**-3  # P rounded to e4m3 (AITER's fp8-q rule): one e4m3 ulp
BF16_REL_ERR = _CASES["BF16_REL_ERR"]


def fp8_case(kv_lens: list[int], **kwargs: object):
    """`make_case` with e4m3 q and KV and non-unit scales (the fp8 Gluon kernel's inputs)."""
    e4m3 = {"kv_dtype": FP8, "kv_scale": 0.5, "q_dtype": FP8, "q_scale": 0.25}
    return make_case(kv_lens, **(e4m3 | kwargs))


def check_fp8(case, plan, *, fp8_p: bool = True, **kwargs: object) -> torch.Tensor:
    """`check` of an e4m3 case: P's rounding (e4m3 by default) and the fp8 QK MMA's error."""
    p_rel_err = E4M3_P_REL_ERR if fp8_p else BF16_REL_ERR
    return check(case, plan, fp8_p=fp8_p, p_rel_err=p_rel_err,
                 score_err=fp8_mma_score_err(case), **kwargs)  # fmt: skip


WS = "warp-specialized"


@pytest.fixture
def gluon_launches(monkeypatch: pytest.MonkeyPatch) -> list[torch.dtype | str]:
    """The cache dtype of each launch of `decode_kernel`, `WS` for one of the warp-specialized
    kernel (which a bf16 launch without a config takes): a test asserts the kernel it tests
    ran."""
    return spy_gluon_kernel(monkeypatch, lambda kv_dtype, ws: WS if ws else kv_dtype)


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_h64_split_and_unsplit_works(page_size: int, config: dict, gluon_launches) -> None:
    case, plan = h64_split_case(page_size)
    check(case, plan, causal=True, config=config)
    assert gluon_launches, "the Gluon kernel did not run"


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_causal_q4_packed_rows_and_masked_split(config: dict, gluon_launches) -> None:
    case, plan = causal_q4_case()
    check(case, plan, causal=True, config=config)
    check(case, plan, causal=False, config=config)
    assert gluon_launches, "the Gluon kernel did not run"


def test_folded_h128_planner_plan_and_head_groups(gluon_launches) -> None:
    case, plan, grouped = folded_h128_case()
    check(case, plan, causal=True, config=_GLUON)
    check(case, plan, causal=True, config=_GLUON | {"SPLIT_GROUPS": 1})
    check(case, grouped, causal=True, config=_GLUON)  # a 64-head plan, run for both groups
    assert gluon_launches == [torch.bfloat16] * 3, "the Gluon kernel did not take every launch"


def test_kv_scale_in_memory_and_e4m3_p(gluon_launches) -> None:
    case, plan = kv_scale_case()
    by_value = check(case, plan, causal=True, config=_GLUON)
    in_memory = kv_scale_in_memory(case, plan, config=_GLUON)
    assert torch.equal(in_memory, by_value), "a kv_scale tensor changed O"
    rounded = check(case, plan, causal=True, fp8_p=True, p_rel_err=2.0**-3, config=_GLUON)
    plain, _ = run(case, plan, fp8_p=False, config=_GLUON)
    assert (rounded - plain).abs().max() > 1e-3, "fp8_p=True did not round P"
    assert gluon_launches == [torch.bfloat16] * 4


def test_default_launch_is_gluon_and_triton_stays_selectable(gluon_launches) -> None:
    case = make_case([64, 20], q_len=1, num_heads=64, page_size=16, seed=25)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    check(case, plan, causal=True)
    assert gluon_launches == [WS], "the default 64-row bf16 launch is not the WS Gluon kernel"
    check(case, plan, causal=True, config={"GLUON": 0})
    assert gluon_launches == [WS], "GLUON: 0 did not select the Triton kernel"


# --------------------------------------------------------------------------------------------
# e4m3 q and KV (kernels/gluon_mla/decode_kernel.py over an e4m3 cache)
# --------------------------------------------------------------------------------------------

needs_fp8 = pytest.mark.skipif(FP8 is None, reason="torch has no float8_e4m3fn")


@needs_fp8
@pytest.mark.parametrize("config", FP8_CONFIGS, ids=FP8_CONFIG_IDS)
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("num_heads", [64, 16])
def test_fp8_split_and_unsplit_works(
    num_heads: int, page_size: int, config: dict, gluon_launches
) -> None:
    # 16 heads: 16 rows padded to one 64-row block. Tiles past 64 tokens, split works.
    case = fp8_case([150, 37, 300, 5], q_len=1, num_heads=num_heads, page_size=page_size,
                    seed=41)  # fmt: skip
    cut = max(1, 96 // page_size)
    tiles = unfolded_tiles(case, {0: (cut,), 2: (cut, 2 * cut)})
    plan = hand_plan(case, tiles, num_programs=5, heads_per_work=num_heads)
    rounded = check_fp8(case, plan, causal=True, config=config)
    plain = check_fp8(case, plan, causal=True, config=config, fp8_p=False)
    assert (rounded - plain).abs().max() > 1e-3, "P was not rounded to e4m3 by default"
    assert gluon_launches == [FP8, FP8], "the fp8 Gluon kernel did not run"


@needs_fp8
def test_fp8_causal_q4_packed_rows_and_masked_split(gluon_launches) -> None:
    case = fp8_case([70, 17, 45, 2], q_len=4, num_heads=16, page_size=16, seed=42)
    plan = hand_plan(case, unfolded_tiles(case, {0: (2,), 1: (1,)}), num_programs=3,
                     heads_per_work=16)  # fmt: skip
    for causal in (True, False):
        check_fp8(case, plan, causal=causal, config=FP8_CONFIGS[0])
    assert gluon_launches == [FP8, FP8], "the fp8 Gluon kernel did not run"


@needs_fp8
def test_fp8_folded_h128_planner_plan_head_groups_and_scales_in_memory(gluon_launches) -> None:
    case = fp8_case([200, 31, 90], q_len=1, num_heads=128, page_size=16, seed=43)
    plan = planned(case, arch="triton", num_cus=4)  # 2 x 64 heads, folded
    assert plan.fold_ratio == 2 and plan.num_partials > 0
    cfg = FP8_CONFIGS[0]
    by_value = check_fp8(case, plan, causal=True, config=cfg)
    check_fp8(case, plan, causal=True, config=cfg | {"SPLIT_GROUPS": 1})
    grouped = hand_plan(case, unfolded_tiles(case, {0: (3,)}), num_programs=2, heads_per_work=64)
    check_fp8(case, grouped, causal=True, config=cfg)
    scales = {"q_scale": torch.tensor([0.25]), "kv_scale": torch.tensor([0.5])}
    kwargs = case.launch_kwargs() | {k: v.to(case.q.device) for k, v in scales.items()}
    in_memory, _ = tm.persistent_mla_decode(case.q, case.kv_cache, plan, causal=True,
                                            config=cfg, **kwargs)  # fmt: skip
    assert torch.equal(in_memory.double().cpu(), by_value), "scale tensors changed O"
    assert gluon_launches == [FP8] * 4, "the fp8 Gluon kernel did not take every launch"


@needs_fp8
def test_fp8_default_dispatch_follows_hopper_configs(gluon_launches) -> None:
    case = fp8_case([64, 20], q_len=1, num_heads=64, page_size=16, seed=44)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    check_fp8(case, plan, causal=True)
    default_gluon = (64, "fp8") in HOPPER_CONFIGS
    assert gluon_launches == ([FP8] if default_gluon else []), "not the HOPPER_CONFIGS choice"
    check_fp8(case, plan, causal=True, config={"GLUON": 0})
    bf16_q = make_case([64, 20], q_len=1, num_heads=64, page_size=16, seed=44, kv_dtype=FP8,
                       kv_scale=0.5)  # fmt: skip
    check(bf16_q, plan, causal=True, config=FP8_CONFIGS[0], fp8_p=False)
    assert len(gluon_launches) == int(default_gluon), "bf16 q over e4m3 KV took a Gluon kernel"


# --------------------------------------------------------------------------------------------
# Negative controls (both kernels)
# --------------------------------------------------------------------------------------------

KINDS = ["bf16", pytest.param("fp8", marks=needs_fp8)]


def _kind_case(kind: str, kv_lens: list[int], **kwargs: object):
    """(a case of `kind`, the `check` keywords that run its Gluon kernel at its tolerance)."""
    if kind == "fp8":
        case = fp8_case(kv_lens, **kwargs)
        tol = {"p_rel_err": E4M3_P_REL_ERR, "score_err": fp8_mma_score_err(case)}
        return case, {"config": FP8_CONFIGS[0], **tol}
    return make_case(kv_lens, **kwargs), {"config": _GLUON}


@pytest.mark.parametrize("kind", KINDS)
def test_negative_control_read_past_end(kind: str, gluon_launches) -> None:
    case, how = _kind_case(kind, [40, 17], q_len=1, num_heads=64, page_size=16, seed=26)
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=64)
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, **how, _fault="read_past_end")
    assert gluon_launches == [case.kv_cache.dtype]


@pytest.mark.parametrize("kind", KINDS)
def test_negative_control_dropped_kv_scale(kind: str, gluon_launches) -> None:
    case, how = _kind_case(kind, [30, 20], q_len=1, num_heads=64, page_size=16, seed=27,
                           kv_scale=0.5)  # fmt: skip
    plan = hand_plan(case, unfolded_tiles(case, {0: (1,)}), num_programs=2, heads_per_work=64)
    check(case, plan, **how)  # the same case and tolerance pass unbroken
    with pytest.raises(AssertionError, match=r"exceeds tolerance|lse - ref"):
        check(case, plan, **how, _fault="drop_kv_scale")
    assert gluon_launches == [case.kv_cache.dtype] * 2


@pytest.mark.parametrize("kind", KINDS)
def test_negative_control_idle_head_group(kind: str, gluon_launches) -> None:
    case, how = _kind_case(kind, [50, 20], q_len=1, num_heads=128, page_size=16, seed=28)
    plan = hand_plan(case, unfolded_tiles(case, {}), num_programs=2, heads_per_work=64)
    with pytest.raises(AssertionError, match="non-finite output"):
        check(case, plan, **how, _fault="skip_head_group")
    assert gluon_launches == [case.kv_cache.dtype]
