"""Self-tests of `kernels.plan_slice.paired_range`: the works each program of a PAIR_GROUPS
launch takes.

The device function runs in a one-line Triton kernel (on the interpreter without a GPU)
over folded plans of the suite planner; the test checks what the decode relies on: every
work of every head group is taken by exactly one program, group 0 keeps its slices, and a
group-g work goes to the slice whose group-0 works span its start.
"""

from __future__ import annotations

import os

import pytest
import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"

triton = pytest.importorskip("triton", reason="triton is not installed")
import triton.language as tl  # noqa: E402

from conformance.persistent import plan_persistent_decode  # noqa: E402
from kernels.plan_slice import paired_range  # noqa: E402

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
PAGE = 16


@triton.jit
def _ranges_kernel(work_indptr_ptr, work_info_ptr, out_ptr, fold_ratio, seq_q):
    grp = tl.program_id(0)
    pid = tl.program_id(1)
    begin = tl.load(work_indptr_ptr + pid)
    end = tl.load(work_indptr_ptr + pid + 1)
    num_works = tl.load(work_indptr_ptr + tl.num_programs(1))
    first, last = paired_range(work_info_ptr, begin, end, num_works, grp, fold_ratio, seq_q)
    tl.store(out_ptr + (pid * fold_ratio + grp) * 2, first)
    tl.store(out_ptr + (pid * fold_ratio + grp) * 2 + 1, last)


def _plan(kv_lens: list[int], heads: int, q_len: int, num_cus: int):
    pages = [-(-n // PAGE) for n in kv_lens]
    return plan_persistent_decode(
        torch.arange(len(kv_lens) + 1, dtype=torch.int32) * q_len,
        torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32),
        torch.tensor([n - (p - 1) * PAGE for n, p in zip(kv_lens, pages, strict=True)],
                     dtype=torch.int32),
        num_heads_q=heads, max_seqlen_qo=q_len, uni_seqlen_qo=q_len, page_size=PAGE,
        kv_granularity=1, causal=True, max_split_per_batch=-1, q_dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16, arch="triton", num_cus=num_cus,
    )  # fmt: skip


def _ranges(plan) -> list[list[tuple[int, int]]]:
    """(first, last) of every (program, group), from the device function."""
    programs = plan.work_indptr.numel() - 1
    out = torch.full((programs * plan.fold_ratio * 2,), -1, dtype=torch.int32, device=DEVICE)
    _ranges_kernel[(plan.fold_ratio, programs)](
        plan.work_indptr.to(DEVICE), plan.work_info_set.contiguous().to(DEVICE), out,
        plan.fold_ratio, max(1, plan.max_seqlen_qo),
    )  # fmt: skip
    pairs = out.view(programs, plan.fold_ratio, 2).tolist()
    return [[tuple(pair) for pair in row] for row in pairs]


def _start(row: list[int], fold: int, seq_q: int) -> tuple[int, int]:
    vrow = row[2]
    return ((vrow // (fold * seq_q)) * seq_q + vrow % seq_q, row[4])


CASES = [
    ([40, 23], 1, 3),
    ([200], 1, 6),  # one request over every program
    ([5, 90, 2, 33], 2, 4),
    ([17, 64, 48], 1, 1),
    ([30] * 5, 1, 3),
    ([512] * 6, 1, 7),
    ([33, 1000, 7, 250, 64, 64, 3], 1, 11),
]


@pytest.mark.parametrize("heads", [128, 256])
@pytest.mark.parametrize(("kv_lens", "q_len", "num_cus"), CASES)
def test_every_work_runs_once_where_group_0_of_its_range_runs(
    kv_lens: list[int], q_len: int, num_cus: int, heads: int
) -> None:
    plan = _plan(kv_lens, heads, q_len, num_cus)
    fold, seq_q = plan.fold_ratio, max(1, plan.max_seqlen_qo)
    assert fold == heads // 64, "the case tests nothing"
    rows = plan.work_info_set[: plan.num_works].tolist()
    indptr = plan.work_indptr.tolist()
    taken: dict[int, tuple[int, int]] = {}
    for pid, groups in enumerate(_ranges(plan)):
        for grp, (first, last) in enumerate(groups):
            assert 0 <= first <= last <= plan.num_works, f"program ({grp}, {pid}): bad range"
            for w in range(first, last):
                if rows[w][0] % fold == grp:
                    assert w not in taken, f"work {w} taken by {taken[w]} and ({grp}, {pid})"
                    taken[w] = (grp, pid)
        assert groups[0] == (indptr[pid], indptr[pid + 1]), "group 0 must keep its slice"
    assert sorted(taken) == list(range(plan.num_works)), "a work runs on no program"
    # Group 0's works of each slice span [its first start, the next slice's first start):
    # every other group's work starts there.
    starts0 = sorted(
        (_start(rows[w], fold, seq_q), pid)
        for pid in range(len(indptr) - 1)
        for w in range(indptr[pid], indptr[pid + 1])
        if rows[w][0] % fold == 0
    )
    for w, (grp, pid) in taken.items():
        if grp:
            owner = max(p for start, p in starts0 if start <= _start(rows[w], fold, seq_q))
            assert pid == owner, f"work {w} of group {grp} runs on {pid}, not {owner}"
