"""Shared inputs of the reference selftests: a paged decode batch and hand-made work plans.

Loaded by the test modules of this folder with ``runpy`` (it is not a test module).
`RefBatch` holds q, a NaN-poisoned paged cache and its page table (with per-tensor scales);
`make_batch` draws one, `split_plan` makes an AITER v1.2 plan by hand, `run_plan` executes a
plan on a batch (`kernels.plan_exec`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from conformance.persistent.plan import WorkPlan
from kernels.paged import block_table_to_csr
from kernels.plan_exec import PlanOutput, execute_plan
from kernels.reference import mla_decode_reference

D = 576
DV = 512
SM_SCALE = 1.0 / math.sqrt(D)
UNUSED_PAGE = 2147480000  # FlashMLA's filler for unused block-table entries


@dataclass
class RefBatch:
    """One decode batch: q, a paged cache (slack slots NaN) and its page table, with scales."""

    q: torch.Tensor
    cache: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    q_scale: float = 1.0
    kv_scale: float = 1.0

    @property
    def page_size(self) -> int:
        return self.cache.shape[1]

    def csr(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return block_table_to_csr(self.block_table, self.seq_lens, self.page_size)

    def scales(self, **kw: object) -> dict[str, object]:
        """The batch's scales, overridden by `kw`, plus any other keyword in `kw`."""
        return {"q_scale": self.q_scale, "kv_scale": self.kv_scale, **kw}

    def reference(self, **kw: object) -> tuple[torch.Tensor, torch.Tensor]:
        """`mla_decode_reference` of the batch (fp64)."""
        return mla_decode_reference(
            self.q, self.cache, query_start_loc=self.query_start_loc, seq_lens=self.seq_lens,
            block_table=self.block_table, sm_scale=SM_SCALE, **self.scales(**kw),
        )  # fmt: skip

    def run(self, plan: WorkPlan, **kw: object) -> PlanOutput:
        """`execute_plan` of `plan` on the batch's CSR page list."""
        kv_indptr, kv_indices, last = self.csr()
        return execute_plan(
            plan, self.q, self.cache, kv_indptr=kv_indptr, kv_indices=kv_indices,
            kv_last_page_lens=last, page_size=self.page_size, sm_scale=SM_SCALE,
            **self.scales(**kw),
        )  # fmt: skip


def run_plan(batch: RefBatch, plan: WorkPlan, **kw: object) -> PlanOutput:
    """`execute_plan` on a batch's CSR page list."""
    return batch.run(plan, **kw)


def make_batch(
    q_lens: list[int],
    kv_lens: list[int],
    *,
    heads: int = 4,
    page_size: int = 4,
    dtype: torch.dtype = torch.bfloat16,
    poison: float = float("nan"),
    seed: int = 0,
) -> RefBatch:
    """Random N(0, 1) data; every cache slot at or past a request's seq_len holds `poison`."""
    gen = torch.Generator().manual_seed(seed)
    pages = [(n + page_size - 1) // page_size for n in kv_lens]
    num_blocks = sum(pages) + 3  # spare pages stay poisoned
    cache = torch.full((num_blocks, page_size, D), poison)
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    table = torch.full((len(kv_lens), max([*pages, 1]) + 1), UNUSED_PAGE, dtype=torch.int32)
    flat = cache.view(-1, D)
    for b, (n, npg) in enumerate(zip(kv_lens, pages, strict=True)):
        ids = torch.tensor([perm.pop() for _ in range(npg)], dtype=torch.int64)
        table[b, :npg] = ids.to(torch.int32)
        t = torch.arange(n)
        flat[ids[t // page_size] * page_size + t % page_size] = torch.randn(n, D, generator=gen)
    qsl = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(q_lens), 0)
    q = torch.randn(int(qsl[-1]), heads, D, generator=gen)
    return RefBatch(
        q=q.to(dtype),
        cache=cache.to(dtype),
        query_start_loc=qsl,
        seq_lens=torch.tensor(kv_lens, dtype=torch.int32),
        block_table=table,
    )


def split_plan(
    q_len: int,
    kv_lens: list[int],
    *,
    page_size: int,
    splits: int,
    heads: int,
    fold_ratio: int = 1,
    token_tiles: bool = False,
) -> WorkPlan:
    """A hand-made plan in AITER v1.2 layout, one work per persistent program.

    Each virtual batch (``b * fold_ratio + g``) is one qo tile of `q_len` rows (or, with
    `token_tiles`, one tile per query token with AITER's causal ``batch_tail`` trim, page
    size 1 only); each tile's pages are cut into up to `splits` fragments. Split fragments
    get partial rows ``loc, loc + ts, ...``; unsplit tiles write final rows directly.
    """
    pages = [(n + page_size - 1) // page_size for n in kv_lens]
    page_start = [0]
    for p in pages:
        page_start.append(page_start[-1] + p)
    works: list[list[int]] = []
    red_indptr, final_map, partial_map = [0], [], []
    next_loc = 0
    for vb in range(len(kv_lens) * fold_ratio):
        b = vb // fold_ratio
        q0 = vb * q_len
        tiles = (
            [(q0 + t, q0 + t + 1, q_len - 1 - t) for t in range(q_len)]
            if token_tiles
            else [(q0, q0 + q_len, 0)]
        )
        for qs, qe, tail in tiles:
            usable = pages[b] - tail  # page size 1 when tail > 0
            n = max(1, min(splits, usable))
            cuts = [round(k * usable / n) for k in range(n + 1)]
            locs = []
            for k in range(n):
                end_tok = min(kv_lens[b], cuts[k + 1] * page_size)
                loc = -1
                if n > 1:
                    loc, next_loc = next_loc, next_loc + (qe - qs)
                    locs.append(loc)
                ks, ke = page_start[b] + cuts[k], page_start[b] + cuts[k + 1]
                works.append([vb, loc, qs, qe, ks, ke, kv_lens[b] - end_tok, 0])
            red_indptr.append(red_indptr[-1] + (n if n > 1 else 0))
            final_map.append([qs, qe] if n > 1 else [0, 0])
            partial_map += locs
    i32 = torch.int32
    return WorkPlan(
        work_indptr=torch.arange(len(works) + 1, dtype=i32),
        work_info_set=torch.tensor(works, dtype=i32).reshape(-1, 8),
        reduce_indptr=torch.tensor(red_indptr, dtype=i32),
        reduce_final_map=torch.tensor(final_map, dtype=i32).reshape(-1, 2),
        reduce_partial_map=torch.tensor(partial_map or [0], dtype=i32),
        num_works=len(works),
        num_partials=len(partial_map),
        num_tiles=len(final_map),
        fold_ratio=fold_ratio,
        heads_per_work=heads // fold_ratio,
        max_seqlen_qo=q_len,
    )
