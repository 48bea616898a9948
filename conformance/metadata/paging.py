"""The paging rules of `validate` (V21-V26): block table, slot mapping, block ownership.

They run only with a `block_size`. A request's live blocks are the first
``ceil(seq_len / block_size)`` entries of its block-table row; the block each new token is
written to must belong to that request alone. Blocks only read (a shared prefix) may be
live in several requests.
"""

from __future__ import annotations

import torch

from conformance.errors import MetadataError
from conformance.metadata.checked import Checked

PAD_SLOT_ID = -1
NULL_BLOCK = 0
"""The reserved null block: fills unused table entries, never holds a live token."""
TABLE = "block_table_tensor"


def check_paging_facts(block_size: int | None, num_blocks: int | None) -> None:
    """The paging facts themselves: a usage error (`ValueError`), not a bad record."""
    for name, value in (("block_size", block_size), ("num_blocks", num_blocks)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}: expected an int >= 1, found {value!r}")


def _live(c: Checked) -> list[torch.Tensor]:
    """Each request's live blocks (cut short where its row is too narrow: V21 names it)."""
    assert c.block_size is not None
    table = c.cam.block_table_tensor.cpu().to(torch.int64)
    need = (c.seq + c.block_size - 1) // c.block_size
    return [table[r, : int(need[r])] for r in range(c.cam.num_reqs)]


def check_table_width(c: Checked) -> None:
    if c.block_size is None:
        return
    width = c.cam.block_table_tensor.shape[1]
    for r in range(c.cam.num_reqs):
        need = -(-int(c.seq[r]) // c.block_size)
        if need > width:
            raise MetadataError(
                f"{TABLE}[{r}]",
                f">= {need} blocks (seq_len {int(c.seq[r])}, block size {c.block_size})",
                f"{width} blocks",
            )


def check_block_ids(c: Checked) -> None:
    if c.block_size is None:
        return
    for r, blocks in enumerate(_live(c)):
        bad = blocks < 0 if c.num_blocks is None else (blocks < 0) | (blocks >= c.num_blocks)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            bound = ">= 0" if c.num_blocks is None else f"in [0, {c.num_blocks})"
            raise MetadataError(f"{TABLE}[{r}, {i}]", f"a block id {bound}", int(blocks[i]))


def check_no_null_block(c: Checked) -> None:
    if c.block_size is None:
        return
    for r, blocks in enumerate(_live(c)):
        null = (blocks == NULL_BLOCK).nonzero().flatten()
        if null.numel():
            raise MetadataError(
                f"{TABLE}[{r}, {int(null[0])}]",
                f"a live block (block {NULL_BLOCK} is the reserved null block)",
                NULL_BLOCK,
            )


def check_distinct_blocks(c: Checked) -> None:
    if c.block_size is None:
        return
    for r, blocks in enumerate(_live(c)):
        uniq, counts = torch.unique(blocks, return_counts=True)
        if bool((counts > 1).any()):
            b = int(uniq[counts > 1][0])
            where = (blocks == b).nonzero().flatten().tolist()
            raise MetadataError(
                f"{TABLE}[{r}, {where[1]}]",
                "distinct blocks within one request",
                f"block {b} at logical blocks {where}",
            )


def _written(c: Checked, r: int, start: int, end: int) -> torch.Tensor:
    """Positions of request `r`'s new tokens."""
    return torch.arange(int(c.seq[r]) - (end - start), int(c.seq[r]))


def check_slots(c: Checked) -> None:
    if c.block_size is None:
        return
    slots, live, size = c.cam.slot_mapping.cpu(), _live(c), c.block_size
    for r, (start, end) in enumerate(c.ranges()):
        pos = _written(c, r, start, end)
        expected = live[r][pos // size] * size + pos % size
        found = slots[start:end]
        if not torch.equal(found, expected):
            bad = int((found != expected).nonzero()[0])
            raise MetadataError(
                f"slot_mapping[{start + bad}]",
                f"slot {int(expected[bad])} (request {r}, position {int(pos[bad])})",
                int(found[bad]),
            )


def check_write_ownership(c: Checked) -> None:
    """A block a request writes to is live in no other request."""
    if c.block_size is None or not c.cam.num_reqs:
        return
    live = _live(c)
    uniq, counts = torch.unique(torch.cat(live), return_counts=True)
    shared = uniq[counts > 1]
    if not shared.numel():
        return
    for r, (start, end) in enumerate(c.ranges()):
        logical = torch.unique(_written(c, r, start, end) // c.block_size)
        hit = torch.isin(live[r][logical], shared).nonzero().flatten()
        if not hit.numel():
            continue
        i = int(logical[int(hit[0])])
        b = int(live[r][i])
        other = next(o for o in range(len(live)) if o != r and bool((live[o] == b).any()))
        j = int((live[other] == b).nonzero()[0])
        raise MetadataError(
            f"{TABLE}[{r}, {i}]",
            f"a block only request {r} holds (its new tokens are written to it)",
            f"block {b}, also live in request {other} at logical block {j}",
        )
