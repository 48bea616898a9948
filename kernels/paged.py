"""The paged KV cache: gathering a request's tokens, and block-table → CSR conversion.

Cache layout: ``kv_cache[num_blocks, page_size, D]`` (a ``[num_blocks, page_size, 1, D]``
cache with one kv head is accepted too). Token ``t`` of a request lives in page
``pages[t // page_size]`` at slot ``t % page_size``. Two ways to name the pages:

- CAM style: ``block_table[b, :ceil(seq_lens[b] / page_size)]`` (entries past that are unused
  and may hold anything, e.g. FlashMLA's 2147480000);
- CSR style (AITER/FlashInfer): ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` with
  ``kv_last_page_lens[b]`` valid tokens in the last page.

Only the slots of tokens ``< seq_len`` are ever read, so NaN-poisoned slack slots (the rest
of a last page, unused pages) never reach a result.
"""

from __future__ import annotations

import torch


def paged_cache_view(kv_cache: torch.Tensor) -> torch.Tensor:
    """`kv_cache` as ``[num_blocks, page_size, D]``; a 4-D cache must have one kv head."""
    if kv_cache.dim() == 4:
        if kv_cache.shape[2] != 1:
            raise ValueError(
                f"kv_cache: expected [num_blocks, page_size, 1, D] (one kv head), found shape "
                f"{tuple(kv_cache.shape)}"
            )
        return kv_cache[:, :, 0, :]
    if kv_cache.dim() != 3:
        raise ValueError(
            f"kv_cache: expected [num_blocks, page_size, D], found shape {tuple(kv_cache.shape)}"
        )
    return kv_cache


def pages_for(seq_lens: torch.Tensor, page_size: int) -> torch.Tensor:
    """Pages each request occupies: ``ceil(seq_lens / page_size)`` (int64)."""
    if page_size < 1:
        raise ValueError(f"page_size: expected >= 1, found {page_size}")
    lens = seq_lens.to(torch.int64)
    return (lens + page_size - 1) // page_size


def block_table_to_csr(
    block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Convert a CAM block table to AITER's CSR page list.

    Returns int32 ``(kv_indptr [B+1], kv_indices [Σ pages], kv_last_page_lens [B])``.
    ``kv_indptr[0] == 0`` (AITER's planner requires it). ``kv_last_page_lens[b]`` is
    ``seq_lens[b] - (pages - 1) * page_size``; for an empty request it is `page_size`
    (FlashInfer/vLLM's rule), so ``(pages - 1) * page_size + last`` is the token count for
    every request, empty ones included.
    """
    if block_table.dim() != 2 or seq_lens.dim() != 1 or block_table.shape[0] != len(seq_lens):
        raise ValueError(
            f"block_table/seq_lens: expected [B, max_blocks] and [B], found "
            f"{tuple(block_table.shape)} and {tuple(seq_lens.shape)}"
        )
    if bool((seq_lens < 0).any()):
        raise ValueError(f"seq_lens: expected >= 0, found {seq_lens.tolist()}")
    pages = pages_for(seq_lens, page_size)
    if len(pages) and int(pages.max()) > block_table.shape[1]:
        b = int(pages.argmax())
        raise ValueError(
            f"block_table: request {b} needs {int(pages[b])} pages for seq_len "
            f"{int(seq_lens[b])} at page_size {page_size}, table has {block_table.shape[1]} columns"
        )
    kv_indptr = torch.zeros(len(pages) + 1, dtype=torch.int32, device=pages.device)
    kv_indptr[1:] = torch.cumsum(pages, 0).to(torch.int32)
    used = torch.arange(block_table.shape[1], device=pages.device)[None, :] < pages[:, None]
    kv_indices = block_table.to(torch.int32)[used]
    last = seq_lens.to(torch.int64) - (pages - 1) * page_size
    last = torch.where(pages == 0, torch.full_like(last, page_size), last)
    return kv_indptr, kv_indices.contiguous(), last.to(torch.int32)


def csr_token_counts(
    kv_indptr: torch.Tensor, kv_last_page_lens: torch.Tensor, page_size: int
) -> torch.Tensor:
    """Tokens of each batch in a CSR page list: ``(pages - 1) * page_size + last`` (0 if no page).

    With page_size 1 the page count is the token count and `kv_last_page_lens` is not read
    (AITER reads it only for page_size > 1).
    """
    pages = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64)
    if page_size == 1:
        return pages
    last = kv_last_page_lens.to(torch.int64)
    return torch.where(pages > 0, (pages - 1) * page_size + last, torch.zeros_like(pages))


def token_slots(pages: torch.Tensor, start: int, end: int, page_size: int) -> torch.Tensor:
    """Flat cache slots (``page * page_size + offset``) of tokens ``[start, end)``.

    `pages` lists the request's pages in order (a block-table row or a CSR slice); token
    positions are relative to the request's first token.
    """
    if not 0 <= start <= end <= len(pages) * page_size:
        raise ValueError(
            f"token range: expected 0 <= start <= end <= {len(pages) * page_size} "
            f"({len(pages)} pages of {page_size}), found [{start}, {end})"
        )
    t = torch.arange(start, end, dtype=torch.int64, device=pages.device)
    return pages.to(torch.int64)[t // page_size] * page_size + t % page_size


def gather_slots(kv_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Rows ``[len(slots), D]`` of the cache at flat slots; the error names a bad page id."""
    cache = paged_cache_view(kv_cache)
    num_blocks, page_size, width = cache.shape
    if len(slots) and (int(slots.min()) < 0 or int(slots.max()) >= num_blocks * page_size):
        bad = slots[(slots < 0) | (slots >= num_blocks * page_size)][0]
        raise IndexError(
            f"page id {int(bad) // page_size} out of range [0, {num_blocks}) "
            f"(kv_cache has {num_blocks} blocks of {page_size})"
        )
    return cache.reshape(num_blocks * page_size, width).index_select(0, slots)


def gather_request_kv(
    kv_cache: torch.Tensor, block_table_row: torch.Tensor, seq_len: int, page_size: int
) -> torch.Tensor:
    """Tokens ``[0, seq_len)`` of one request, ``[seq_len, D]``, via its block-table row."""
    num_pages = (seq_len + page_size - 1) // page_size
    if num_pages > len(block_table_row):
        raise ValueError(
            f"block_table row: seq_len {seq_len} needs {num_pages} pages, row has "
            f"{len(block_table_row)}"
        )
    slots = token_slots(block_table_row[:num_pages], 0, seq_len, page_size)
    return gather_slots(kv_cache, slots)


def gather_csr_kv(
    kv_cache: torch.Tensor,
    *,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    batch: int,
    start: int,
    end: int,
    page_size: int,
) -> torch.Tensor:
    """Tokens ``[start, end)`` of CSR batch `batch`, ``[end - start, D]``."""
    lo, hi = int(kv_indptr[batch]), int(kv_indptr[batch + 1])
    slots = token_slots(kv_indices[lo:hi], start, end, page_size)
    return gather_slots(kv_cache, slots)
