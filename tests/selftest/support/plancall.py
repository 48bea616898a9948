"""Planner calls of the selftests: persistent planner, device planner, planned decode.

`plan_args` gives the keyword arguments of a valid `plan_persistent_decode` call (page 1,
gfx942, bf16, 16 heads, 8 CUs) with overrides; `invariants_of` checks a plan against the
batch of its call, the other `check_plan` inputs read from the plan's params;
`decode_scalars` the scalar arguments of a bf16 one-token decode planned for Triton.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from conformance.persistent import check_inputs, check_plan

BF16 = torch.bfloat16
FP8_FNUZ = torch.float8_e4m3fnuz
FP8_FN = torch.float8_e4m3fn


def i32(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def cumsum0(values: list[int]) -> torch.Tensor:
    return i32([0, *itertools.accumulate(values)])


def plan_args(
    q_lens: list[int], kv_lens: list[int], last: list[int] | None = None, **overrides: Any
) -> dict[str, Any]:
    """Keyword arguments of a valid plan (page 1, gfx942, bf16, 16 heads) with overrides."""
    args: dict[str, Any] = {
        "qo_indptr": cumsum0(q_lens),
        "kv_indptr": cumsum0(kv_lens),
        "kv_last_page_lens": i32(last if last is not None else [1] * len(kv_lens)),
        "num_heads_q": 16,
        "max_seqlen_qo": max(q_lens),
        "uni_seqlen_qo": q_lens[0] if len(set(q_lens)) == 1 else -1,
        "page_size": 1,
        "kv_granularity": 16,
        "causal": True,
        "max_split_per_batch": -1,
        "q_dtype": BF16,
        "kv_dtype": BF16,
        "arch": "gfx942",
        "num_cus": 8,
    }
    args.update(overrides)
    return args


def works_of(plan: Any) -> list[tuple[int, ...]]:
    """Works as (batch, loc, qs, qe, ks, ke, off), as docs/planner.md writes them."""
    return [tuple(w[:7]) for w in plan.work_info_set[: plan.num_works].tolist()]


def invariants_of(plan: Any, args: dict[str, Any]) -> list[Any]:
    """`check_plan` of `plan` against the batch of its call `args`."""
    return check_plan(plan, **check_inputs(args))


def decode_scalars(*, num_heads_q: int, page_size: int, num_cus: int) -> dict[str, Any]:
    """The scalar planner arguments of a bf16 decode, one q token a request, for Triton."""
    return {
        "num_heads_q": num_heads_q,
        "max_seqlen_qo": 1,
        "uni_seqlen_qo": 1,
        "page_size": page_size,
        "kv_granularity": 1,
        "causal": True,
        "max_split_per_batch": -1,
        "q_dtype": torch.bfloat16,
        "kv_dtype": torch.bfloat16,
        "arch": "triton",
        "num_cus": num_cus,
    }
