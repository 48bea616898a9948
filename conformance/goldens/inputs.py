"""A golden case's deterministic inputs and the planner call a builder makes for it.

From the case's seed: a random block table (blocks drawn without replacement, block 0 the
null block, spare blocks unused), kv tokens and q ~ N(0, 1), quantised to the arch's e4m3
flavour with the case's per-tensor scales where the case says fp8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from conformance.goldens.cases import GoldenCase
from conformance.goldens.record import QK_DIM, poisoned_cache
from conformance.numerics.fp8 import quantize_per_tensor

SPARE_BLOCKS = 2
"""Cache blocks no request uses: they stay NaN-poisoned."""


@dataclass(frozen=True)
class Inputs:
    """One case's deterministic inputs."""

    q: torch.Tensor
    kv_tokens: torch.Tensor
    q_scale: float
    kv_scale: float
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_lens: torch.Tensor
    num_blocks: int

    def cache(self, page_size: int) -> torch.Tensor:
        """The NaN-poisoned paged cache."""
        return poisoned_cache(
            self.kv_tokens,
            block_table=self.block_table,
            seq_lens=self.seq_lens,
            page_size=page_size,
            num_blocks=self.num_blocks,
        )


def _i32(values: Sequence[int]) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int32)


def make_inputs(case: GoldenCase) -> Inputs:
    """Inputs from the case's seed: block table, then kv tokens, then q (in that order)."""
    gen = torch.Generator().manual_seed(case.seed)
    page = case.page_size
    pages = [-(-n // page) for n in case.seq_lens]
    num_blocks = sum(pages) + 1 + SPARE_BLOCKS
    pool = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    table = torch.zeros((case.batch, max([1, *pages])), dtype=torch.int32)
    cursor = 0
    for b, count in enumerate(pages):
        table[b, :count] = _i32(pool[cursor : cursor + count])
        cursor += count
    kv = torch.randn(sum(case.seq_lens), QK_DIM, generator=gen)
    q = torch.randn(case.num_tokens, case.heads, QK_DIM, generator=gen)
    if case.kv_dtype == "fp8":
        kv_tokens, kv_scale = quantize_per_tensor(kv, case.fp8_dtype, case.kv_scale)
    else:
        kv_tokens, kv_scale = kv.to(torch.bfloat16), 1.0
    if case.q_dtype == "fp8":
        q_in, q_scale = quantize_per_tensor(q, case.fp8_dtype, case.q_scale)
    else:
        q_in, q_scale = q.to(torch.bfloat16), 1.0
    kv_indptr = _i32([0, *torch.tensor(pages).cumsum(0).tolist()])
    last = [n - (p - 1) * page for n, p in zip(case.seq_lens, pages, strict=True)]
    return Inputs(
        q=q_in,
        kv_tokens=kv_tokens,
        q_scale=q_scale,
        kv_scale=kv_scale,
        query_start_loc=_i32(range(0, case.num_tokens + 1, case.q_len)),
        seq_lens=_i32(case.seq_lens),
        block_table=table,
        kv_indptr=kv_indptr,
        kv_indices=torch.cat([table[b, :p] for b, p in enumerate(pages)]),
        kv_last_page_lens=_i32(last),
        num_blocks=num_blocks,
    )


def planner_kwargs(case: GoldenCase, inputs: Inputs) -> dict[str, Any]:
    """The reference planner's arguments for this case (what a builder passes)."""
    return {
        "qo_indptr": inputs.query_start_loc,
        "kv_indptr": inputs.kv_indptr,
        "kv_last_page_lens": inputs.kv_last_page_lens,
        "num_heads_q": case.heads,
        "max_seqlen_qo": case.q_len,
        "uni_seqlen_qo": case.q_len,
        "page_size": case.page_size,
        "kv_granularity": case.granularity,
        "causal": case.planner_causal,
        "max_split_per_batch": case.max_split_per_batch,
        "q_dtype": case.q_torch_dtype,
        "kv_dtype": case.kv_torch_dtype,
        "arch": case.arch,
        "num_cus": case.num_cus,
    }
