"""Self-tests of the Triton decode's head-group launches (kernels/triton_mla/).

Three launch options read the KV of one range with several programs side by side: a folded
plan with ``SPLIT_GROUPS`` (program g takes the works of head group g) or ``PAIR_GROUPS``
(program g takes the works of head group g that start where the slice's group-0 works run),
and an unfolded plan made for a divisor of the head count, run once per head group. Each must
give the same function as the plain launch: checked against an fp64 reference (tolerance as in
test_triton_mla.py: bf16 rounding of P and O, |ΔO| ≤ 2⁻⁷·(max|V| + |O|) + 1e-5·max|V|).
On a machine without CUDA the kernels run on the Triton interpreter (tiny shapes).
"""

from __future__ import annotations

import inspect
import math
import os
import sys

import pytest
import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"

pytest.importorskip("triton", reason="triton is not installed; the Triton MLA kernels need it")

import kernels.triton_mla as tm  # noqa: E402
from conformance.persistent import plan_persistent_decode  # noqa: E402

if not ON_GPU and not tm.interpreted():
    tm = tm.reload_kernels()  # imported earlier without the interpreter: decorate again

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
PAGE = 16
SM_SCALE = 0.5
EPS = 2.0**-7


def _case(kv_lens: list[int], heads: int, q_len: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    pages = [math.ceil(n / PAGE) for n in kv_lens]
    blocks = sum(pages) + 2
    cache = (torch.randn(blocks, PAGE, 576, generator=gen) / 10).clamp(-1, 1)
    perm = torch.randperm(blocks, generator=gen)
    indices = perm[: sum(pages)]
    cache[perm[sum(pages) :]] = float("nan")
    start = 0
    for n, p in zip(kv_lens, pages, strict=True):
        cache[indices[start + p - 1], n - (p - 1) * PAGE :] = float("nan")  # past the end
        start += p
    q = torch.randn(len(kv_lens) * q_len, heads, 576, generator=gen).clamp(-4, 4)
    last = [n - (p - 1) * PAGE for n, p in zip(kv_lens, pages, strict=True)]
    return {
        "q": q.to(torch.bfloat16),
        "kv_cache": cache.to(torch.bfloat16),
        "kv_indptr": torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32),
        "kv_indices": indices.to(torch.int32),
        "kv_last_page_lens": torch.tensor(last, dtype=torch.int32),
        "qo_indptr": torch.arange(len(kv_lens) + 1, dtype=torch.int32) * q_len,
    }


def _reference(case: dict[str, torch.Tensor], kv_lens: list[int], q_len: int):
    q = case["q"].double()
    out = torch.zeros(q.shape[0], q.shape[1], 512, dtype=torch.float64)
    lse = torch.zeros(q.shape[0], q.shape[1], dtype=torch.float64)
    indptr = case["kv_indptr"].tolist()
    for b, n in enumerate(kv_lens):
        pos = torch.arange(n)
        table = case["kv_indices"][indptr[b] : indptr[b + 1]].long()
        kv = case["kv_cache"][table[pos // PAGE], pos % PAGE].double()
        for i in range(q_len):
            t = b * q_len + i
            k = kv[: n - q_len + i + 1]
            scores = q[t] @ k.T * SM_SCALE
            lse[t] = torch.logsumexp(scores, -1)
            out[t] = torch.softmax(scores, -1) @ k[:, :512]
    return out, lse, kv_cache_vmax(case)


def kv_cache_vmax(case: dict[str, torch.Tensor]) -> float:
    """Largest |V| among the finite cache entries."""
    v = case["kv_cache"][..., :512].double()
    return float(v[torch.isfinite(v)].abs().max())


def _plan(case: dict[str, torch.Tensor], *, heads: int, q_len: int, num_cus: int):
    return plan_persistent_decode(
        case["qo_indptr"], case["kv_indptr"], case["kv_last_page_lens"],
        num_heads_q=heads, max_seqlen_qo=q_len, uni_seqlen_qo=q_len, page_size=PAGE,
        kv_granularity=1, causal=True, max_split_per_batch=-1, q_dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16, arch="triton", num_cus=num_cus,
    )  # fmt: skip


def _run(case: dict[str, torch.Tensor], plan, **kwargs: object):
    dev = {k: v.to(DEVICE) for k, v in case.items()}
    tokens, heads, _ = dev["q"].shape
    out = torch.full((tokens, heads, 512), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    lse = torch.full((tokens, heads), float("nan"), dtype=torch.float32, device=DEVICE)
    tm.persistent_mla_decode(
        dev["q"], dev["kv_cache"], plan.to(DEVICE), kv_indptr=dev["kv_indptr"],
        kv_indices=dev["kv_indices"], kv_last_page_lens=dev["kv_last_page_lens"],
        qo_indptr=dev["qo_indptr"], page_size=PAGE, sm_scale=SM_SCALE, out=out, lse=lse,
        **kwargs,
    )  # fmt: skip
    return out.double().cpu(), lse.double().cpu()


def assert_close_to_reference(
    *,
    out: torch.Tensor,
    lse: torch.Tensor,
    ref_out: torch.Tensor,
    ref_lse: torch.Tensor,
    v_max: float,
) -> None:
    """Every element written and within the bf16 error model of the fp64 reference."""
    __tracebackhide__ = True
    assert torch.isfinite(out).all(), "an output element is NaN/inf (unwritten or bad read)"
    tol = EPS * (v_max + ref_out.abs()) + 1e-5 * v_max
    err = (out - ref_out).abs()
    assert (err <= tol).all(), f"max |O - ref| - tol = {float((err - tol).max()):.3e}"
    assert float((lse - ref_lse).abs().max()) <= 1e-4, "LSE off the reference"


KV_LENS = [70, 23, 41]


GROUP_OPTIONS = ["SPLIT_GROUPS", "PAIR_GROUPS"]
# The kernel of both launches a test compares bit for bit: on Hopper the two-warpgroup Gluon
# decode (without a config a 64-row bf16 launch takes the warp-specialized one), elsewhere
# the Triton kernel.
ONE_KERNEL = {"GLUON": 1}


@pytest.mark.parametrize("option", GROUP_OPTIONS)
@pytest.mark.parametrize("q_len", [1, 2])
def test_split_groups_of_a_folded_plan(q_len: int, option: str) -> None:
    # 128 heads fold into 2 groups of 64 (triton profile); 5 programs split the requests.
    kv_lens = [40, 23]
    case = _case(kv_lens, heads=128, q_len=q_len, seed=1)
    plan = _plan(case, heads=128, q_len=q_len, num_cus=3)
    assert plan.fold_ratio == 2 and plan.num_partials > 0, "the case tests nothing"
    ref_out, ref_lse, v_max = _reference(case, kv_lens, q_len)
    out, lse = _run(case, plan, config=ONE_KERNEL | {option: True})
    assert_close_to_reference(out=out, lse=lse, ref_out=ref_out, ref_lse=ref_lse, v_max=v_max)
    plain_out, plain_lse = _run(case, plan, config=ONE_KERNEL)
    assert torch.equal(out, plain_out) and torch.equal(lse, plain_lse), (
        "a group-split launch must compute every work exactly as the plain launch does"
    )


@pytest.mark.parametrize(
    ("kv_lens", "q_len", "num_cus"),
    [
        ([200], 1, 6),  # one request over every program: group 1's works far from group 0's
        ([5, 90, 2, 33], 2, 4),  # a two-token request, q tiles of two tokens
        ([17, 64, 48], 1, 1),  # one program holds every work
        ([30, 30, 30, 30, 30], 1, 3),  # requests cut at other places in each group
    ],
)
def test_paired_groups_run_every_work_once(kv_lens: list[int], q_len: int, num_cus: int) -> None:
    # PAIR_GROUPS hands group 1's works to the programs where group 0's of the same range
    # run; every work must still run (outputs are NaN-prefilled) and compute what it does in
    # the plain launch.
    case = _case(kv_lens, heads=128, q_len=q_len, seed=7)
    plan = _plan(case, heads=128, q_len=q_len, num_cus=num_cus)
    assert plan.fold_ratio == 2, "the case tests nothing"
    ref_out, ref_lse, v_max = _reference(case, kv_lens, q_len)
    out, lse = _run(case, plan, config=ONE_KERNEL | {"PAIR_GROUPS": True})
    assert_close_to_reference(out=out, lse=lse, ref_out=ref_out, ref_lse=ref_lse, v_max=v_max)
    plain_out, plain_lse = _run(case, plan, config=ONE_KERNEL)
    assert torch.equal(out, plain_out) and torch.equal(lse, plain_lse)


def test_unfolded_plan_run_once_per_head_group() -> None:
    # A 16-head plan run for 32 heads: two programs per slice, heads 0-15 and 16-31.
    case = _case(KV_LENS, heads=32, q_len=2, seed=2)
    plan = _plan(case, heads=16, q_len=2, num_cus=4)
    assert plan.fold_ratio == 1 and plan.heads_per_work == 16 and plan.num_partials > 0
    ref_out, ref_lse, v_max = _reference(case, KV_LENS, 2)
    out, lse = _run(case, plan)
    assert_close_to_reference(out=out, lse=lse, ref_out=ref_out, ref_lse=ref_lse, v_max=v_max)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reduce merges unwritten partials
@pytest.mark.parametrize("mode", ["split-groups", "pair-groups", "head-groups"])
def test_negative_control_a_launch_that_skips_a_head_group_is_caught(mode: str) -> None:
    # Broken on purpose (_fault="skip_head_group"): the programs of head group 1 do nothing,
    # so half of the heads stay NaN-prefilled and the reference check must reject them.
    folded = mode != "head-groups"
    heads = 128 if folded else 32
    case = _case(KV_LENS, heads=heads, q_len=1, seed=3)
    plan = _plan(case, heads=heads if folded else 16, q_len=1, num_cus=3)
    ref_out, ref_lse, v_max = _reference(case, KV_LENS, 1)
    config = {mode.replace("-", "_").upper(): True} if folded else None
    out, lse = _run(case, plan, config=config, _fault="skip_head_group")
    with pytest.raises(AssertionError, match="NaN/inf"):
        assert_close_to_reference(out=out, lse=lse, ref_out=ref_out, ref_lse=ref_lse, v_max=v_max)


def test_heads_that_fit_no_plan_layout_are_rejected() -> None:
    case = _case(KV_LENS, heads=128, q_len=1, seed=4)
    plan = _plan(case, heads=128, q_len=1, num_cus=3)
    with pytest.raises(ValueError, match="heads_per_work=64"):
        _run({**case, "q": case["q"][:, :96].contiguous()}, plan)  # 96 ≠ 64 × 2


@pytest.mark.parametrize("q_len", [1, 2])
def test_register_prefetch_loop_computes_what_the_pipelined_loop_does(q_len: int) -> None:
    # The hand-prefetched main loop (used where Triton does not pipeline the loads) must give
    # the same bits as the plain loop, splits and causal tails included.
    case = _case(KV_LENS, heads=16, q_len=q_len, seed=5)
    plan = _plan(case, heads=16, q_len=q_len, num_cus=4)
    assert plan.num_partials > 0, "the case tests nothing"
    ref_out, ref_lse, v_max = _reference(case, KV_LENS, q_len)
    out, lse = _run(case, plan, config={"REG_PREFETCH": True})
    assert_close_to_reference(out=out, lse=lse, ref_out=ref_out, ref_lse=ref_lse, v_max=v_max)
    plain_out, plain_lse = _run(case, plan, config={"REG_PREFETCH": False})
    assert torch.equal(out, plain_out) and torch.equal(lse, plain_lse)


def test_reduce_gives_the_same_merge_under_every_config(monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU reduce config (one head per program, 16 partials a step) checked on this
    # machine too: a long group (one request split over 24 programs) against the reference.
    case = _case([600], heads=16, q_len=1, seed=6)
    plan = _plan(case, heads=16, q_len=1, num_cus=24)
    assert plan.num_partials > 16, "the case needs a group longer than one BLOCK_K step"
    ref_out, ref_lse, v_max = _reference(case, [600], 1)
    monkeypatch.setitem(tm.REDUCE_CONFIGS, "interpreter", dict(tm.REDUCE_CONFIGS["gpu"]))
    monkeypatch.setitem(tm.REDUCE_CONFIGS, "gpu", dict(tm.REDUCE_CONFIGS["gpu"]))
    out, lse = _run(case, plan)
    assert_close_to_reference(out=out, lse=lse, ref_out=ref_out, ref_lse=ref_lse, v_max=v_max)


def test_the_warp_specialized_decode_takes_64_bf16_rows_where_no_config_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The launch decision as on an sm_90 GPU (the Gluon decode usable); nothing is launched.
    from kernels import gluon_mla
    from kernels.triton_mla.launch import plan_launch

    monkeypatch.setattr(gluon_mla, "usable", lambda *args, **kwargs: True)
    case = _case(KV_LENS, heads=128, q_len=1, seed=5)
    plan = _plan(case, heads=128, q_len=1, num_cus=3)
    defaults = {
        name: p.default
        for name, p in inspect.signature(tm.persistent_mla_decode).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    keys = ("kv_indptr", "kv_indices", "kv_last_page_lens", "qo_indptr")

    def chosen(
        cache: torch.Tensor = case["kv_cache"], q: torch.Tensor = case["q"], **kwargs: object
    ) -> tuple[bool, int]:
        call = defaults | {k: case[k] for k in keys} | {"page_size": PAGE, "sm_scale": 0.5}
        launch = plan_launch(q, cache, plan, **(call | kwargs))
        return launch.use_ws, launch.cfg["BLOCK_N"]

    assert chosen() == (True, tm.WS_CONFIGS["bf16"]["BLOCK_N"])
    assert chosen(config={"STAGES": 3}) == (False, 64), "a config without WS took WS"
    fp8 = case["kv_cache"].to(torch.float8_e4m3fn)
    assert not chosen(fp8, q_scale=1.0)[0], "bf16 q over an e4m3 cache took the WS decode"
    q8 = case["q"].to(torch.float8_e4m3fn)
    by_default = "fp8" in tm.WS_BY_DEFAULT
    assert chosen(fp8, q8)[0] == by_default, "e4m3 q and KV: not the WS_BY_DEFAULT choice"
    ws8 = {"WS": 1, "STAGES": 3}  # BLOCK_N from WS_CONFIGS["fp8"], not the Gluon decode's 64
    assert chosen(fp8, q8, config=ws8) == (True, tm.WS_CONFIGS["fp8"]["BLOCK_N"])
    monkeypatch.setattr(gluon_mla, "_variant_disabled", {"ws": "it did not compile"})
    assert chosen() == (False, 64), "a disabled WS decode was chosen"


def test_the_narrow_decode_takes_e4m3_blocks_under_64_rows_by_its_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The launch decision as on an sm_90 GPU (the Gluon decode usable); nothing is launched.
    from kernels import gluon_mla
    from kernels.triton_mla.launch import plan_launch

    monkeypatch.setattr(gluon_mla, "usable", lambda *args, **kwargs: True)
    monkeypatch.setattr(gluon_mla, "_variant_disabled", {})
    case = _case(KV_LENS, heads=16, q_len=1, seed=6)
    plan = _plan(case, heads=16, q_len=1, num_cus=3)
    call = {k: case[k] for k in ("kv_indptr", "kv_indices", "kv_last_page_lens", "qo_indptr")}
    call |= {"page_size": PAGE, "sm_scale": 0.5, "q_scale": 1.0, "kv_scale": 1.0}
    defaults = {
        name: p.default
        for name, p in inspect.signature(tm.persistent_mla_decode).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    q8 = case["q"].to(torch.float8_e4m3fn)
    kv8 = case["kv_cache"].to(torch.float8_e4m3fn)

    def chosen(q=q8, cache=kv8, **kwargs: object) -> tuple[bool, int]:
        launch = plan_launch(q, cache, plan, **(defaults | call | kwargs))
        return launch.use_narrow, launch.cfg["num_warps"]

    monkeypatch.setattr(tm.config, "NARROW_BY_DEFAULT", (16,))
    assert chosen() == (True, tm.NARROW_CONFIG["num_warps"]), "16 e4m3 rows: not narrow"
    monkeypatch.setattr(tm.config, "NARROW_BY_DEFAULT", ())
    assert not chosen()[0], "a table without 16 rows took the narrow decode"
    assert chosen(config={"NARROW": 1, "num_warps": 8}) == (True, 8)
    assert not chosen(config={"STAGES": 2})[0], "a config without NARROW took it"
    assert not chosen(q=case["q"], config={"NARROW": 1})[0], "bf16 q over e4m3 took it"
    with pytest.raises(ValueError, match="4 or 8 warps"):
        chosen(config={"NARROW": 1, "num_warps": 2})
    monkeypatch.setattr(tm.config, "NARROW_BY_DEFAULT", (16,))
    monkeypatch.setattr(gluon_mla, "_variant_disabled", {"narrow": "it did not compile"})
    assert chosen() == (False, 8), "a disabled narrow decode was chosen"
    wide = _case(KV_LENS, heads=64, q_len=1, seed=6)
    wide_plan = _plan(wide, heads=64, q_len=1, num_cus=3)
    wide_call = defaults | call | {k: wide[k] for k in call if k in wide}
    q64, kv64 = (wide[k].to(torch.float8_e4m3fn) for k in ("q", "kv_cache"))
    launch = plan_launch(q64, kv64, wide_plan, **(wide_call | {"config": {"NARROW": 1}}))
    assert (launch.use_narrow, launch.cfg["num_warps"]) == (False, 8), "64 rows: not 8 warps"


@pytest.mark.parametrize(
    ("kv_lens", "kinds", "config", "paired"),
    [
        ([40, 23, 9], ("bf16",), None, True),  # 6 requests x groups for 4 programs
        ([40], ("bf16",), None, False),  # 2 for 4: a request spans slices
        ([40, 23, 9], (), None, False),  # bf16 not among the kinds
        ([40, 23, 9], ("bf16",), {"GLUON": 1}, False),  # a config decides for itself
    ],
)
def test_hopper_launches_pair_head_groups_where_pairs_by_default_says(
    monkeypatch: pytest.MonkeyPatch,
    kv_lens: list[int],
    kinds: tuple[str, ...],
    config: dict[str, int] | None,
    paired: bool,
) -> None:
    monkeypatch.setattr(sys.modules["kernels.triton_mla.config"], "PAIR_BY_DEFAULT", kinds)
    case = _case(kv_lens, heads=128, q_len=1, seed=8)
    plan = _plan(case, heads=128, q_len=1, num_cus=4)
    programs = plan.work_indptr.numel() - 1
    launch = _hopper_launch(monkeypatch, case, plan, config)
    assert launch.use_gluon
    expected = (3, (2, programs)) if paired else (0, (programs,))
    assert (launch.shared["GROUP_MODE"], launch.grid) == expected


def test_a_narrow_config_on_a_64_row_launch_runs_two_warpgroups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # NARROW takes 16 or 32 rows; at 64 the two-warpgroup decode runs, at its 8 warps
    # whatever the narrow config named (4 warps would not compile and disable Gluon).
    case = _case([40, 23], heads=64, q_len=1, seed=9)
    plan = _plan(case, heads=64, q_len=1, num_cus=2)
    launch = _hopper_launch(monkeypatch, case, plan, {"GLUON": 1, "NARROW": 1, "num_warps": 4})
    assert launch.use_gluon and not launch.use_narrow and not launch.use_ws
    assert launch.cfg["num_warps"] == 8


def _hopper_launch(monkeypatch: pytest.MonkeyPatch, case, plan, config):
    """The launch `persistent_mla_decode` would run on a Hopper GPU (stood in for by
    `gluon_mla.usable`); nothing runs."""
    launch_module = sys.modules["kernels.triton_mla.launch"]
    monkeypatch.setattr(launch_module.gluon_mla, "usable", lambda *args: True)
    return launch_module.plan_launch(
        case["q"], case["kv_cache"], plan, kv_indptr=case["kv_indptr"],
        kv_indices=case["kv_indices"], kv_last_page_lens=case["kv_last_page_lens"],
        qo_indptr=case["qo_indptr"], page_size=PAGE, sm_scale=SM_SCALE, q_scale=1.0,
        kv_scale=1.0, causal=True, out=None, lse=None, fp8_p=None, config=config, _fault=None,
    )  # fmt: skip
