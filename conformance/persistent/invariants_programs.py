"""Plan invariants of the programs: ``work_indptr`` (I1) and the v1.2 budget (I2, I11)."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.persistent.plan_state import Finding, Findings, PlanState, ceil_div
from conformance.persistent.profiles import PROFILES


def check_i1_work_indptr(state: PlanState) -> Findings:
    """I1: ``work_indptr`` runs from 0 up to ``num_works``, one entry per program plus one."""
    wip, plan = state.wip, state.plan
    if len(wip) < 2:
        yield Finding(f"work_indptr has {len(wip)} entries, expected >= 2", fields=("work_indptr",))
        return
    if wip[0] != 0:
        yield Finding(f"work_indptr[0]={wip[0]}, expected 0", fields=("work_indptr",))
    for c in range(state.num_cu):
        if wip[c + 1] < wip[c]:
            yield Finding(
                f"work_indptr decreases at program {c}: {wip[c]} -> {wip[c + 1]}",
                fields=("work_indptr",),
            )
    if wip[-1] != plan.num_works:
        yield Finding(
            f"work_indptr[-1]={wip[-1]} but num_works={plan.num_works}",
            fields=("work_indptr", "num_works"),
        )
    if plan.num_works > plan.work_info_set.shape[0]:
        yield Finding(
            f"num_works={plan.num_works} exceeds work_info_set rows {plan.work_info_set.shape[0]}",
            fields=("num_works", "work_info_set"),
        )
    if state.num_cus is not None:
        arch = plan.params.get("arch")
        occupancy = PROFILES[arch].occupancy if arch in PROFILES else 1
        if state.num_cu != state.num_cus * occupancy:
            yield Finding(
                f"work_indptr has {len(wip)} entries, expected num_cus*"
                f"occupancy+1={state.num_cus * occupancy + 1}",
                fields=("work_indptr",),
            )
    for w, info in enumerate(state.works):
        if info.padding != 0:
            yield Finding(f"padding={info.padding}, expected 0", work=w, fields=("padding",))


@dataclass(frozen=True)
class Budget:
    """The v1.2 scheduler's budget of one plan: splits, payload per program, tail slack."""

    num_splits: int
    payload: int
    slack: int
    overhead: int
    busy: list[int]


def budget(state: PlanState) -> Budget | None:
    """The budget the plan is held to, or None when the budget checks do not apply."""
    if not state.check_budget or state.gran is None or state.msb is None or not state.tiles:
        return None
    gran, overhead = state.gran, max(1, ceil_div(16, state.page_size))
    num_cu = state.num_cu
    num_splits = num_cu if state.msb < 0 else min(num_cu, state.msb * state.num_vb)
    if num_splits < 1:
        return None
    blocks = []
    for tile in state.tiles:
        begin, end = state.kv_range(tile.batch)
        blocks.append(ceil_div(end - begin, gran))
    payload = ceil_div(sum(b + overhead for b in blocks), num_splits) + overhead
    busy = [c for c in range(num_cu) if state.wip[c + 1] > state.wip[c]]
    return Budget(num_splits, payload, ceil_div(state.max_sq - 1, gran), overhead, busy)


def check_i2_busy_prefix(state: PlanState) -> Findings:
    """I2: (budget) the programs with work form a prefix no longer than ``num_splits``."""
    plan_budget = budget(state)
    if plan_budget is None:
        return
    busy = plan_budget.busy
    if busy and busy != list(range(len(busy))):
        idle = next(c for c in range(len(busy)) if c not in busy)
        yield Finding(
            f"program {idle} has no work but program {busy[-1]} has: busy programs are "
            f"not a prefix",
            fields=("work_indptr",),
        )
    if len(busy) > plan_budget.num_splits:
        yield Finding(
            f"{len(busy)} programs have work, more than num_splits={plan_budget.num_splits}",
            fields=("work_indptr",),
        )


def check_i11_program_payload(state: PlanState) -> Findings:
    """I11: (budget) each program's blocks plus overhead stay within the payload, but for
    one absorbed tail of at most ``ceil((max_seqlen_qo - 1) / kv_granularity)`` blocks."""
    plan_budget = budget(state)
    if plan_budget is None:
        return
    gran = state.gran
    assert gran is not None  # budget() is None without it
    for c in plan_budget.busy:
        cost = 0
        for w in range(state.wip[c], min(state.wip[c + 1], len(state.works))):
            tile = state.tile_of.get(w)
            if tile is None:
                continue
            info = state.works[w]
            _, end = state.kv_range(tile.batch)
            stop = end if state.is_last_of_tile(w) else info.kv_end
            cost += ceil_div(stop - info.kv_start, gran) + plan_budget.overhead
        if cost > plan_budget.payload + plan_budget.slack:
            yield Finding(
                f"program {c} holds {cost} blocks incl. overhead, over the "
                f"payload {plan_budget.payload} plus a tail allowance of {plan_budget.slack}",
                work=state.wip[c],
                fields=("work_indptr", "kv_start", "kv_end"),
            )
