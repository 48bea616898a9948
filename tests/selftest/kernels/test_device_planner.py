"""Self-tests of the device planner (kernels/triton_planner.py, kernels/device_plan.py).

Certified like any planner: every buffer (written regions and the ``UNWRITTEN`` rest)
and every count equal the reference planner's, on the plan-exact goldens and on random
batches of every profile; a batch the reference rejects raises the same `PlanError`.
Without CUDA the kernel runs under Triton's interpreter (``TRITON_INTERPRET=1`` is set
here, before Triton is imported) on tiny batches; with CUDA it runs natively and
``MLA_PLANNER_FUZZ=N`` sets the number of random batches (scripts/gpu_planner.sh: 2000,
up to 1024 batches and 304 CUs).
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import os
import random
from typing import Any

import pytest
import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"

pytest.importorskip("triton", reason="triton is not installed; the device planner needs it")

import kernels.planner_chain as pc  # noqa: E402
import kernels.planner_finish as pf  # noqa: E402
import kernels.planner_setup as ps  # noqa: E402
import kernels.triton_planner as tp  # noqa: E402
from conformance.errors import PlanError  # noqa: E402
from conformance.goldens import GoldenStore, load_golden  # noqa: E402
from conformance.persistent import plan_persistent_decode  # noqa: E402
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan  # noqa: E402
from kernels import device_plan  # noqa: E402

from plancall import decode_scalars, plan_args  # noqa: E402

if not ON_GPU and type(tp.plan_kernel).__name__ != "InterpretedFunction":
    # imported earlier without the interpreter: decorate again, callees first
    ps, pc, pf, tp = (importlib.reload(m) for m in (ps, pc, pf, tp))

pytestmark = pytest.mark.selftest

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
FUZZ = int(os.environ.get("MLA_PLANNER_FUZZ", "0")) or (600 if ON_GPU else 60)
FP8 = torch.float8_e4m3fnuz
COUNT_NAMES = ("num_works", "num_partials", "num_tiles")
HOPPER = ON_GPU and torch.version.hip is None and torch.cuda.get_device_capability()[0] >= 9
FORMS = [
    pytest.param({"fused": True}, id="one-launch"),
    pytest.param({"fused": False, "pdl": False}, id="setup-grid"),
    pytest.param({"fused": True, "chain": True}, id="one-launch-chain"),
    pytest.param({"fused": False, "pdl": False, "chain": True}, id="setup-grid-chain"),
    pytest.param({"fused": True, "chain": False}, id="one-launch-rounds"),
    pytest.param(
        {"fused": False, "pdl": True},
        id="setup-grid-pdl",
        marks=pytest.mark.skipif(not HOPPER, reason="programmatic launch needs a Hopper GPU"),
    ),
]
"""The planner's forms (`plan_on_device` keywords): every one must give the same plan."""


def plan_differences(actual: WorkPlan, expected: WorkPlan) -> list[str]:
    """Every buffer (whole) and count that differs, named; empty when identical."""
    problems = []
    for name in PLAN_BUFFERS:
        a, e = getattr(actual, name).cpu(), getattr(expected, name).cpu()
        if a.shape != e.shape:
            problems.append(f"{name}: shape {tuple(a.shape)}, expected {tuple(e.shape)}")
        elif not torch.equal(a, e):
            first = tuple(int(i) for i in torch.nonzero(a != e)[0])
            got, want = a[first].tolist(), e[first].tolist()
            problems.append(f"{name}{list(first)}: {got}, expected {want}")
    for name in COUNT_NAMES:
        if getattr(actual, name) != getattr(expected, name):
            problems.append(f"{name}: {getattr(actual, name)}, expected {getattr(expected, name)}")
    return problems


def random_call(rng: random.Random, *, large: bool) -> dict[str, Any]:
    """A planner call of any profile: short, long and empty-ish kv, tail-rule probes."""
    arch = rng.choice(["gfx942", "gfx950", "triton"])
    batch = rng.choice([1, 2, 3, 64, 333, 1024] if large else [1, 2, 3, 4])
    page = rng.choice([1, 1, 2, 16, 64])
    sq = rng.choice([1, 1, 2, 3, 4])
    heads = rng.choice([16, 32, 64, 128] if arch == "triton" else [16, 32, 48, 64, 128])
    uni = rng.random() < 0.7
    q_lens = [sq] * batch if uni else [rng.randint(1, sq) for _ in range(batch)]
    top = rng.choice([2, 20, 300, 9000] if large else [2, 5, 40, 300])
    tokens = [max(q, rng.randint(1, top)) for q in q_lens]
    if rng.random() < 0.3:  # one past / one short of a block boundary
        tokens = [max(q, 16 * rng.randint(1, 8) + rng.choice([-1, 1])) for q in q_lens]
    elif rng.random() < 0.3:  # one length: programs snap on tile boundaries, often every one
        tokens = [max(q, top) for q in q_lens]
    pages = [(n + page - 1) // page for n in tokens]
    q_dtype = rng.choice([torch.bfloat16, FP8])
    return {
        "qo_indptr": torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32),
        "kv_indptr": torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32),
        "kv_last_page_lens": torch.tensor(
            [n - (p - 1) * page for n, p in zip(tokens, pages, strict=True)], dtype=torch.int32
        ),
        "num_heads_q": heads,
        "max_seqlen_qo": max(q_lens),
        "uni_seqlen_qo": sq if uni else -1,
        "page_size": page,
        "kv_granularity": rng.choice([1, 2, 16, max(page, 16)]),
        "causal": rng.random() < 0.8,
        "max_split_per_batch": rng.choice([-1, -1, 1, 2, 32]),
        "q_dtype": q_dtype,
        "kv_dtype": FP8 if q_dtype == FP8 else rng.choice([torch.bfloat16, FP8]),
        "arch": arch,
        "num_cus": rng.choice([80, 132, 304, 7] if large else [1, 2, 3, 5]),
    }


def on_device(call: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in call.items()}


@pytest.mark.parametrize("form", FORMS)
def test_random_batches_plan_bit_identically(form: dict[str, bool]) -> None:
    rng = random.Random(17 + len(form) + form["fused"])
    planned = rejected = 0
    while planned < FUZZ:
        call = random_call(rng, large=ON_GPU and rng.random() < 0.5)
        try:
            expected = plan_persistent_decode(**call)
        except PlanError:
            rejected += 1
            continue
        actual = device_plan.plan_on_device(**on_device(call), **form)
        problems = plan_differences(actual, expected)
        scalars = {k: v for k, v in call.items() if not isinstance(v, torch.Tensor)}
        assert not problems, f"batch {planned} ({scalars}):\n  " + "\n  ".join(problems)
        planned += 1
    assert rejected < planned, f"{rejected} of the random calls were rejected: a weak generator"


def uniform_call(batch: int, tokens: int, heads: int, num_cus: int) -> dict[str, Any]:
    """A batch of one kv length at page 64, one q token each (the decode benchmark's)."""
    pages = (tokens + 63) // 64
    return {
        "qo_indptr": torch.arange(batch + 1, dtype=torch.int32),
        "kv_indptr": torch.arange(batch + 1, dtype=torch.int32) * pages,
        "kv_last_page_lens": torch.full((batch,), tokens - (pages - 1) * 64, dtype=torch.int32),
        **decode_scalars(num_heads_q=heads, page_size=64, num_cus=num_cus),
    }


@pytest.mark.parametrize("heads", [16, 128])
def test_the_chain_finds_every_snap_of_a_batch_that_snaps_at_every_program(heads: int) -> None:
    # tiles one payload long (16 heads) or half of one (128 heads, two head groups):
    # every program ends on a tile boundary, a round per program without the chain
    call = uniform_call(8, 1024 if heads == 16 else 256, heads, 8)
    expected = plan_persistent_decode(**call)
    rounds = {}
    for chain in (True, False):
        plan = device_plan.plan_on_device(**on_device(call), chain=chain)
        assert not plan_differences(plan, expected)
        rounds[chain] = plan.host_counts()["rounds"]
    assert rounds == {True: 0, False: 8}


def pages_call(pages: list[int], num_cus: int) -> dict[str, Any]:
    """`uniform_call`'s batch (16 heads, last pages full) with these page counts."""
    call = uniform_call(len(pages), 64, 16, num_cus)
    call["kv_indptr"] = torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32)
    return call


@pytest.mark.parametrize(
    ("pages", "num_cus", "tried", "rounds"),
    [
        ([1] * 8 + [41] * 3 + [1], 3, False, 1),  # program 0 spans 8 tiles: boundary 0 unknown
        ([20] * 4 + [1] * 8, 5, True, 5),  # boundaries 0-3 known, the short tiles' not
        ([16] * 8, 8, True, 0),  # a snap at every program: the chain finds them all
    ],
    ids=["unknown-at-0", "unknown-later", "whole-chain"],
)
def test_the_chain_is_tried_only_when_boundary_0_snaps_within_its_window(
    pages: list[int], num_cus: int, tried: bool, rounds: int
) -> None:
    """Forced on, the chain is tried (it writes every boundary's next snap into the chain
    buffer, poisoned beforehand) only when boundary 0's next snap lies within
    `CHAIN_WINDOW` tiles; tried or not, failed or not, the plan is the reference's."""
    call = pages_call(pages, num_cus)
    expected = plan_persistent_decode(**call)
    for fused in (True, False):
        buffers = device_plan.plan_buffers(**on_device(call))
        buffers.chain.fill_(7)
        plan = device_plan.plan_on_device(
            **on_device(call), buffers=buffers, chain=True, fused=fused
        )
        assert not plan_differences(plan, expected)
        assert plan.host_counts()["rounds"] == rounds
        entries = buffers.chain.numel() // pc.CHAIN_FIELDS.value
        r_star = buffers.chain[pc.C_RSTAR.value * entries :][:entries].cpu()
        assert bool((r_star != 7).any()) == tried, f"chain tried: {not tried}, expected {tried}"


def grid_calls(count: int) -> list[tuple[dict[str, Any], WorkPlan]]:
    """Random calls of 257-700 entries (more than one finish program), with splits."""
    rng = random.Random(5)
    calls = []
    while len(calls) < count:
        call = random_call(rng, large=True)
        batch = rng.choice([130, 200, 300])
        page = call["page_size"]
        tokens = [max(4, rng.randint(1, 400)) for _ in range(batch)]
        for i in rng.sample(range(batch), 3):  # a few requests over several programs
            tokens[i] = rng.randint(5000, 40000)
        pages = [(n + page - 1) // page for n in tokens]
        sq = call["max_seqlen_qo"] if call["uni_seqlen_qo"] > 0 else 1
        call.update(
            qo_indptr=torch.arange(batch + 1, dtype=torch.int32) * sq,
            kv_indptr=torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32),
            kv_last_page_lens=torch.tensor(
                [n - (p - 1) * page for n, p in zip(tokens, pages, strict=True)],
                dtype=torch.int32,
            ),
            max_seqlen_qo=sq,
            uni_seqlen_qo=sq,
            num_cus=rng.choice([7, 24, 80]),
        )
        try:
            expected = plan_persistent_decode(**call)
        except PlanError:
            continue
        if device_plan.FUSED_MAX_ENTRIES < device_plan.plan_buffers(**call).entries <= 700:
            calls.append((call, expected))
    return calls


def test_the_finish_grid_writes_whole_plans_of_large_batches() -> None:
    """Beyond `FUSED_MAX_ENTRIES` entries (the default form: setup, walk, finish grid),
    over poisoned buffers, the plan equals the reference whole: every block of tiles takes
    its running sums from the blocks before it, and split tiles' fragments cross blocks."""
    splits = 0
    for call, expected in grid_calls(8):
        plan = device_plan.plan_on_device(**on_device(call), buffers=poisoned_buffers(call))
        problems = plan_differences(plan, expected)
        scalars = {k: v for k, v in call.items() if not isinstance(v, torch.Tensor)}
        assert not problems, f"{scalars}:\n  " + "\n  ".join(problems)
        splits += int(expected.num_partials > 0)
    assert splits > 0, "no batch split a tile: the continuation fragments went untested"


def golden_ids() -> list[str]:
    ids = list(GoldenStore().read_manifest().entries)
    return ids if ON_GPU else [i for i in ids if i.startswith("tiny-")]


@pytest.mark.parametrize("fused", [True, False], ids=["one-launch", "setup-grid"])
@pytest.mark.parametrize("case_id", golden_ids())
def test_golden_plans_are_reproduced(case_id: str, fused: bool) -> None:
    golden = load_golden(GoldenStore(), case_id)
    actual = device_plan.plan_on_device(**on_device(golden.planner_call()), fused=fused)
    expected = golden.plan()
    problems = [
        p
        for p in plan_differences(actual, expected)
        if not p.startswith(("work_info_set", "reduce_final_map", "reduce_partial_map"))
    ]
    regions = actual.written_regions()
    for name, want in expected.written_regions().items():
        if not torch.equal(regions[name].cpu(), want):
            problems.append(f"{name} differs")
    assert not problems, f"golden {case_id}:\n  " + "\n  ".join(problems)


def base_call(**changes: Any) -> dict[str, Any]:
    """A valid call on 3 CUs (two requests of 2 q tokens, 40 and 50 pages) with changes."""
    return plan_args([2, 2], [40, 50], **{"num_cus": 3, **changes})


@pytest.mark.parametrize(
    "changes",
    [
        {"kv_indptr": torch.tensor([0, 40, 30], dtype=torch.int32)},  # decreasing
        {"kv_indptr": torch.tensor([0, 1, 90], dtype=torch.int32)},  # kv shorter than q
        {"qo_indptr": torch.tensor([0, 2, 5], dtype=torch.int32), "uni_seqlen_qo": -1},
        {"qo_indptr": torch.tensor([0, 1, 2], dtype=torch.int32)},  # uni disagrees
        {"page_size": 16, "kv_last_page_lens": torch.tensor([0, 3], dtype=torch.int32)},
    ],
    ids=["kv-decreasing", "kv-below-q", "q-above-max", "uni-disagrees", "last-page-len"],
)
def test_a_rejected_batch_raises_the_reference_error(changes: dict[str, Any]) -> None:
    call = base_call(**changes)
    with pytest.raises(PlanError) as reference:
        plan_persistent_decode(**call)
    plan = device_plan.plan_on_device(**on_device(call))  # no error yet: nothing read back
    with pytest.raises(PlanError) as device:
        plan.host_counts()
    assert str(device.value) == str(reference.value)


def copied(plan: WorkPlan) -> WorkPlan:
    return dataclasses.replace(plan, **{n: getattr(plan, n).clone() for n in PLAN_BUFFERS})


def test_the_comparison_catches_a_changed_entry_and_count() -> None:
    """Negative control of `plan_differences`: one entry, one count."""
    expected = plan_persistent_decode(**base_call())
    changed = copied(expected)
    changed.work_info_set[1, 5] += 1
    assert plan_differences(changed, expected) == [
        "work_info_set[1, 5]: "
        + (f"{int(changed.work_info_set[1, 5])}, expected {int(expected.work_info_set[1, 5])}")
    ]
    changed = copied(expected)
    changed.num_works -= 1
    assert [p.split(":")[0] for p in plan_differences(changed, expected)] == ["num_works"]


def test_params_are_the_reference_planners() -> None:
    """The provenance (payload and sum_blocks included) names the same derived scalars."""
    call = base_call()
    got = device_plan.plan_on_device(**on_device(call)).params
    want = plan_persistent_decode(**call).params
    assert {k: v for k, v in got.items() if k != "planner"} == {
        k: v for k, v in want.items() if k != "planner"
    }


def test_launch_view_reads_nothing_back() -> None:
    plan = device_plan.plan_on_device(**on_device(base_call()))
    view = device_plan.for_launch(plan)
    assert plan._host is None, "for_launch read the counts back (a host sync)"
    assert view.work_info_set is plan.work_info_set
    assert view.num_works == plan.work_info_set.shape[0]


def test_a_device_plan_moves_to_the_host_as_a_plain_plan() -> None:
    call = base_call()
    moved = device_plan.plan_on_device(**on_device(call)).to("cpu")
    assert type(moved) is WorkPlan
    assert not plan_differences(moved, plan_persistent_decode(**call))


@pytest.mark.parametrize("fused", [True, False], ids=["one-launch", "setup-grid"])
def test_buffers_are_reused_and_overwritten_whole(fused: bool) -> None:
    """A second batch of the same size in the same buffers equals its own reference plan."""
    first = base_call()
    second = base_call(kv_indptr=torch.tensor([0, 300, 302], dtype=torch.int32))
    buffers = device_plan.plan_buffers(**on_device(first))
    device_plan.plan_on_device(**on_device(first), buffers=buffers, fused=fused).host_counts()
    plan = device_plan.plan_on_device(**on_device(second), buffers=buffers, fused=fused)
    assert plan.work_info_set.data_ptr() == buffers.work_info_set.data_ptr()
    assert not plan_differences(plan, plan_persistent_decode(**second))


def poisoned_buffers(call: dict[str, Any]) -> device_plan.DevicePlanBuffers:
    """Buffers for `call` with every plan entry and scratch field set to 7 (not -1)."""
    buffers = device_plan.plan_buffers(**on_device(call))
    for name in (*PLAN_BUFFERS, "scratch"):
        getattr(buffers, name).fill_(7)
    return buffers


class _WithoutFill:
    """A launcher of the setup kernel that passes every fill length as 0 (fields only)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        return lambda *args, **kwargs: self.kernel[grid](*args[:-3], 0, 0, 0, **kwargs)


def test_the_setup_grid_fills_exactly_the_unused_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over poisoned buffers the two-launch plan equals the reference whole; without the
    setup kernel's fill (negative control) some unused (-1) entries keep the poison and no
    used one does: the walk kernel writes every used entry, the fill all the rest."""
    call = base_call(num_cus=5)
    expected = plan_persistent_decode(**call)
    plan = device_plan.plan_on_device(
        **on_device(call), buffers=poisoned_buffers(call), fused=False
    )
    assert not plan_differences(plan, expected)
    monkeypatch.setattr(ps, "setup_kernel", _WithoutFill(ps.setup_kernel))
    broken = device_plan.plan_on_device(
        **on_device(call), buffers=poisoned_buffers(call), fused=False
    )
    kept = 0
    for name in ("work_info_set", "reduce_final_map", "reduce_partial_map"):
        got, want = getattr(broken, name).cpu(), getattr(expected, name)
        differs = got != want
        assert torch.all(want[differs] == -1), f"{name}: a used entry was left to the fill"
        assert torch.all(got[differs] == 7), f"{name}: a differing entry is not the poison"
        kept += int(differs.sum())
    assert kept > 0, "without the fill no entry kept the poison: the control proves nothing"


def test_builder_planner_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    host = plan_persistent_decode
    monkeypatch.delenv(device_plan.PLANNER_ENV, raising=False)
    assert device_plan.builder_planner(torch.device("cpu"), host) is host
    assert isinstance(
        device_plan.builder_planner(torch.device("cuda", 0), host), device_plan.DevicePlanner
    )
    monkeypatch.setenv(device_plan.PLANNER_ENV, "host")
    assert device_plan.builder_planner(torch.device("cuda", 0), host) is host
    monkeypatch.setenv(device_plan.PLANNER_ENV, "gpu")
    with pytest.raises(ValueError, match=device_plan.PLANNER_ENV):
        device_plan.builder_planner(torch.device("cuda", 0), host)


@pytest.mark.parametrize("limit", ["MAX_ENTRIES", "MAX_PROGRAMS"])
def test_device_planner_checks_at_once_and_falls_back_when_too_large(
    monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    planner = device_plan.DevicePlanner(DEVICE)
    with pytest.raises(PlanError, match="kv_indptr"):
        planner(**base_call(kv_indptr=torch.tensor([0, 40, 30], dtype=torch.int32)))
    monkeypatch.setattr(device_plan, limit, 1)
    with pytest.raises(PlanError, match=device_plan.DEVICE_LIMIT):
        device_plan.plan_on_device(**on_device(base_call()))
    plan = planner(**base_call())
    assert not isinstance(plan, device_plan.DeviceWorkPlan)
    assert not plan_differences(plan, plan_persistent_decode(**base_call()))


def test_a_batch_over_the_cost_bound_is_refused_and_planned_on_the_host() -> None:
    call = base_call(
        qo_indptr=torch.tensor([0, 1], dtype=torch.int32),
        kv_indptr=torch.tensor([0, 2**28 + 5], dtype=torch.int32),
        kv_last_page_lens=torch.tensor([1], dtype=torch.int32),
        max_seqlen_qo=1,
        uni_seqlen_qo=1,
        kv_granularity=1,
    )
    plan = device_plan.plan_on_device(**on_device(call))
    with pytest.raises(PlanError, match=device_plan.DEVICE_LIMIT):
        plan.host_counts()
    fallback = device_plan.DevicePlanner(DEVICE)(**call)
    assert not isinstance(fallback, device_plan.DeviceWorkPlan)
    assert not plan_differences(fallback, plan_persistent_decode(**call))


@pytest.mark.skipif(not ON_GPU or torch.version.hip is not None, reason="CUDA graphs need CUDA")
@pytest.mark.parametrize("form", FORMS)
def test_a_captured_plan_replays_for_another_batch(form: dict[str, bool]) -> None:
    """Every form in a CUDA graph: replayed over new inputs, the plan is that batch's."""
    first = base_call(num_cus=132)
    second = base_call(num_cus=132, kv_indptr=torch.tensor([0, 300, 302], dtype=torch.int32))
    inputs = on_device(first)
    buffers = device_plan.plan_buffers(**inputs)
    device_plan.plan_on_device(**inputs, buffers=buffers, **form)  # compile first
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan = device_plan.plan_on_device(**inputs, buffers=buffers, **form)
    for name in ("qo_indptr", "kv_indptr", "kv_last_page_lens"):
        inputs[name].copy_(second[name])
    graph.replay()
    torch.cuda.synchronize()
    assert not plan_differences(plan, plan_persistent_decode(**second))
