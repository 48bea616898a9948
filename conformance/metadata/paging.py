"""The paging rules of `validate`: block table, slot mapping, block ownership.

A request's live blocks are the first ``ceil(seq_len / block_size)`` entries of its
block-table row; the block each new token is written to must belong to that request
alone. Blocks only read (a shared prefix) may be live in several requests.
"""

from __future__ import annotations

import torch

from conformance.errors import MetadataError
from conformance.metadata.record import CommonAttentionMetadata

PAD_SLOT_ID = -1
NULL_BLOCK = 0
"""The reserved null block: fills unused table entries, never holds a live token."""


def check_padding_slots(cam: CommonAttentionMetadata) -> None:
    """Slots past `num_actual_tokens` are padding and must be `PAD_SLOT_ID`."""
    tail = cam.slot_mapping[cam.num_actual_tokens :].cpu()
    bad = (tail != PAD_SLOT_ID).nonzero().flatten()
    if bad.numel():
        index = cam.num_actual_tokens + int(bad[0])
        raise MetadataError(
            f"slot_mapping[{index}]", f"{PAD_SLOT_ID} on a padding token", int(tail[int(bad[0])])
        )


def check_paging_facts(block_size: int | None, num_blocks: int | None) -> None:
    """The paging facts themselves: a usage error (`ValueError`), not a bad record."""
    for name, value in (("block_size", block_size), ("num_blocks", num_blocks)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}: expected an int >= 1, found {value!r}")


def check_paging(
    cam: CommonAttentionMetadata,
    qsl: torch.Tensor,
    seq: torch.Tensor,
    block_size: int,
    num_blocks: int | None,
) -> None:
    """Table width, live block ids, slots where the table puts them, write ownership."""
    table = cam.block_table_tensor.cpu().to(torch.int64)
    need = (seq + block_size - 1) // block_size
    live = []
    for r in range(cam.num_reqs):
        blocks = _live_blocks(table, r, int(need[r]), int(seq[r]), block_size, num_blocks)
        live.append(blocks)
    slots = cam.slot_mapping.cpu()
    writes = []
    for r in range(cam.num_reqs):
        start, end = int(qsl[r]), int(qsl[r + 1])
        pos = torch.arange(int(seq[r]) - (end - start), int(seq[r]))
        logical = pos // block_size
        expected = live[r][logical] * block_size + pos % block_size
        found = slots[start:end]
        if not torch.equal(found, expected):
            bad = int((found != expected).nonzero()[0])
            raise MetadataError(
                f"slot_mapping[{start + bad}]",
                f"slot {int(expected[bad])} (request {r}, position {int(pos[bad])})",
                int(found[bad]),
            )
        writes.append(torch.unique(logical))
    _check_ownership(live, writes)


def _live_blocks(
    table: torch.Tensor, r: int, need: int, seq_len: int, block_size: int, num_blocks: int | None
) -> torch.Tensor:
    if need > table.shape[1]:
        raise MetadataError(
            f"block_table_tensor[{r}]",
            f">= {need} blocks (seq_len {seq_len}, block size {block_size})",
            f"{table.shape[1]} blocks",
        )
    blocks = table[r, :need]
    bad = blocks < 0 if num_blocks is None else (blocks < 0) | (blocks >= num_blocks)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        bound = ">= 0" if num_blocks is None else f"in [0, {num_blocks})"
        raise MetadataError(f"block_table_tensor[{r}, {i}]", f"a block id {bound}", int(blocks[i]))
    null = (blocks == NULL_BLOCK).nonzero().flatten()
    if null.numel():
        raise MetadataError(
            f"block_table_tensor[{r}, {int(null[0])}]",
            f"a live block (block {NULL_BLOCK} is the reserved null block)",
            NULL_BLOCK,
        )
    uniq, counts = torch.unique(blocks, return_counts=True)
    if bool((counts > 1).any()):
        b = int(uniq[counts > 1][0])
        where = (blocks == b).nonzero().flatten().tolist()
        raise MetadataError(
            f"block_table_tensor[{r}, {where[1]}]",
            "distinct blocks within one request",
            f"block {b} at logical blocks {where}",
        )
    return blocks


def _check_ownership(live: list[torch.Tensor], writes: list[torch.Tensor]) -> None:
    """A block a request writes to is live in no other request."""
    if not live:
        return
    all_live = torch.cat(live)
    uniq, counts = torch.unique(all_live, return_counts=True)
    shared = uniq[counts > 1]
    if not shared.numel():
        return
    for r, logical in enumerate(writes):
        written = live[r][logical]
        hit = torch.isin(written, shared).nonzero().flatten()
        if not hit.numel():
            continue
        i = int(logical[int(hit[0])])
        b = int(live[r][i])
        other = next(o for o in range(len(live)) if o != r and bool((live[o] == b).any()))
        j = int((live[other] == b).nonzero()[0])
        raise MetadataError(
            f"block_table_tensor[{r}, {i}]",
            f"a block only request {r} holds (its new tokens are written to it)",
            f"block {b}, also live in request {other} at logical block {j}",
        )
