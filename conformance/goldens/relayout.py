"""A golden batch re-laid in another page size, for a backend whose kernel reads one only.

FlashMLA reads 64-token pages and nothing else, as an engine allocates its cache in the
kernel's block size. The numerics contract does not depend on the page layout: the same kv
tokens, in the same order, give the same output. `relaid` keeps q, the kv tokens and the
reference output and LSE, and lays the tokens out again: each request's pages in a shuffled
order (seeded by the case, so a decode that assumes contiguous pages is caught), block 0 the
null block, one spare block, every slot past a sequence's end NaN-poisoned as before. Only a
plan-free backend is re-laid: a work plan is made for its golden's page size.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from conformance.goldens.record import Golden

RELAID_FROM = "relaid_from_page_size"
"""The metadata key that records a re-laid golden's original page size."""
SPARE_BLOCKS = 1


def page_size_for(golden: Golden, backend: Any) -> int:
    """The page size `backend` reads this golden in: the golden's own, unless the backend
    is plan-free and declares `page_sizes` without it (then its first)."""
    declared = getattr(backend, "page_sizes", None)
    own = golden.case.page_size
    if declared is None or own in declared or backend.plan_format is not None:
        return own
    return int(declared[0])


def for_backend(golden: Golden, backend: Any) -> Golden:
    """The golden as `backend` reads it (re-laid where its declaration needs it)."""
    page_size = page_size_for(golden, backend)
    return golden if page_size == golden.case.page_size else relaid(golden, page_size)


def relaid(golden: Golden, page_size: int) -> Golden:
    """The same batch in pages of `page_size` tokens (see the module docstring)."""
    if page_size < 1:
        raise ValueError(f"page_size: expected an int >= 1, found {page_size!r}")
    case = golden.case
    seq_lens = [int(n) for n in golden["seq_lens"].tolist()]
    pages = [-(-n // page_size) for n in seq_lens]
    total = sum(pages)
    order = torch.randperm(total, generator=torch.Generator().manual_seed(case.seed)) + 1
    ids = order.to(torch.int32).split(pages)
    table = torch.zeros((len(seq_lens), max(pages, default=0) or 1), dtype=torch.int32)
    for row, blocks in enumerate(ids):
        table[row, : len(blocks)] = blocks
    last = [n - (p - 1) * page_size if p else 0 for n, p in zip(seq_lens, pages, strict=True)]
    tensors = dict(golden.tensors)
    tensors.update(
        block_table=table,
        kv_indptr=torch.tensor([0, *pages], dtype=torch.int32).cumsum(0).to(torch.int32),
        kv_indices=torch.cat(ids) if ids else torch.empty(0, dtype=torch.int32),
        kv_last_page_lens=torch.tensor(last, dtype=torch.int32),
    )
    new_case = replace(case, page_size=page_size)
    meta = dict(golden.meta)
    meta.update(
        num_blocks=total + 1 + SPARE_BLOCKS,
        case={**meta["case"], "page_size": page_size},
        **{RELAID_FROM: case.page_size},
    )
    return Golden(case=new_case, stored=replace(golden.stored, tensors=tensors, meta=meta))


def relaid_note(golden: Golden) -> str:
    """`` (re-laid from 16-token pages)`` for a re-laid golden, else ``""``."""
    source = golden.meta.get(RELAID_FROM)
    return "" if source is None else f" (re-laid from {source}-token pages)"
