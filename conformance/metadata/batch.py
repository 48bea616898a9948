"""`BatchSpec` and the factory that turns it into a consistent `CommonAttentionMetadata`.

Unlike vLLM's test helper, the block table and slot mapping the factory builds agree:
every request owns distinct physical blocks (block 0 is the reserved null block), laid
out in a seeded random order, and each new token's slot is where the table puts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from conformance.metadata.paging import NULL_BLOCK
from conformance.metadata.record import CommonAttentionMetadata


@dataclass(frozen=True)
class BatchSpec:
    """Per-request kv lengths (context plus new tokens) and query lengths."""

    seq_lens: tuple[int, ...]
    query_lens: tuple[int, ...]
    name: str = "unnamed"

    def __post_init__(self) -> None:
        if len(self.seq_lens) != len(self.query_lens):
            raise ValueError(
                f"BatchSpec {self.name!r}: seq_lens has {len(self.seq_lens)} entries, "
                f"query_lens has {len(self.query_lens)}"
            )
        for i, (s, q) in enumerate(zip(self.seq_lens, self.query_lens, strict=True)):
            if q < 0 or s < q:
                raise ValueError(
                    f"BatchSpec {self.name!r}: request {i} has seq_len {s} < query_len {q}"
                )

    @property
    def batch_size(self) -> int:
        """Number of requests."""
        return len(self.seq_lens)

    def num_tokens(self) -> int:
        """Total query tokens."""
        return sum(self.query_lens)


def _spec(name: str, seq_lens: Sequence[int], query_lens: Sequence[int]) -> BatchSpec:
    return BatchSpec(tuple(seq_lens), tuple(query_lens), name)


# Literal batch shapes: decode, mixed, multi-token decode, long context, padded rows.
BATCH_SPECS: dict[str, BatchSpec] = {
    s.name: s
    for s in (
        _spec("single_decode", [1024], [1]),
        _spec("small_decode", [32, 40, 17, 100], [1, 1, 1, 1]),
        _spec("medium_decode", [128, 256, 512, 1024, 2048, 77, 5, 1], [1] * 8),
        _spec("large_decode", [2048] * 16 + [4096] * 16, [1] * 32),
        _spec("long_context_decode", [65536, 32768], [1, 1]),
        _spec("mtp2_decode", [64, 300, 17], [2, 2, 2]),
        _spec("mtp4_decode", [40, 577, 4, 1000], [4, 4, 4, 4]),
        _spec("spec_decode_mixed_len", [50, 60, 70], [3, 2, 4]),
        _spec("single_prefill", [64], [64]),
        _spec("small_prefill", [32, 40], [32, 40]),
        _spec("extend", [100, 300], [20, 150]),
        _spec("mixed_small", [32, 40, 48, 56], [1, 1, 5, 5]),
        _spec("mixed_medium", [512, 1024, 256, 128, 2048], [1, 1, 1, 7, 64]),
        _spec("padded_decode", [33, 65, 0, 0], [1, 1, 0, 0]),
        _spec("padded_mtp", [20, 30, 0], [2, 2, 0]),
    )
}


def make_cam(
    spec: BatchSpec,
    *,
    block_size: int,
    device: torch.device | str = "cpu",
    num_blocks: int | None = None,
    seed: int = 0,
    causal: bool = True,
    decode_threshold: int = 1,
) -> CommonAttentionMetadata:
    """Build a consistent `CommonAttentionMetadata` for `spec`.

    Blocks are drawn without replacement from ``1..num_blocks-1`` in a seeded random
    order; unused table entries point at the null block.
    """
    if block_size < 1:
        raise ValueError(f"block_size: expected >= 1, found {block_size}")
    blocks_needed = [-(-s // block_size) for s in spec.seq_lens]
    total = sum(blocks_needed)
    if num_blocks is None:
        num_blocks = total + 1
    if num_blocks < total + 1:
        raise ValueError(
            f"num_blocks: expected >= {total + 1} for {spec.name!r}, found {num_blocks}"
        )
    gen = torch.Generator().manual_seed(seed)
    pool = torch.randperm(num_blocks - 1, generator=gen)[:total] + 1
    width = max([1, *blocks_needed])
    table = torch.full((spec.batch_size, width), NULL_BLOCK, dtype=torch.int32)
    cursor = 0
    for r, count in enumerate(blocks_needed):
        table[r, :count] = pool[cursor : cursor + count].to(torch.int32)
        cursor += count

    query_lens = torch.tensor(spec.query_lens, dtype=torch.int32)
    seq_lens = torch.tensor(spec.seq_lens, dtype=torch.int32)
    qsl = torch.zeros(spec.batch_size + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(query_lens, 0)
    slots, positions = slots_and_positions(spec, table, block_size)
    dev = torch.device(device)
    return CommonAttentionMetadata(
        query_start_loc=qsl.to(dev),
        query_start_loc_cpu=qsl,
        seq_lens=seq_lens.to(dev),
        num_reqs=spec.batch_size,
        num_actual_tokens=spec.num_tokens(),
        max_query_len=max(spec.query_lens, default=0),
        max_seq_len=max(spec.seq_lens, default=0),
        block_table_tensor=table.to(dev),
        slot_mapping=slots.to(dev),
        causal=causal,
        seq_lens_cpu_upper_bound=seq_lens.clone(),
        positions=positions.to(dev),
        is_prefilling=(query_lens > decode_threshold).to(dev),
    )


def slots_and_positions(
    spec: BatchSpec, table: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot and position of each new token of `spec`, where `table` puts them."""
    slots, positions = [], []
    for r, (s, q) in enumerate(zip(spec.seq_lens, spec.query_lens, strict=True)):
        pos = torch.arange(s - q, s, dtype=torch.int64)
        blocks = table[r].to(torch.int64)
        slots.append(blocks[pos // block_size] * block_size + pos % block_size)
        positions.append(pos)
    if not slots:
        return torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64)
    return torch.cat(slots), torch.cat(positions)


def split_decodes_and_prefills(
    cam: CommonAttentionMetadata,
    decode_threshold: int = 1,
    require_uniform: bool = False,
) -> tuple[int, int, int, int]:
    """Count leading decode requests and trailing prefills (vLLM's rule).

    Returns ``(num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens)``.
    Padding rows with query length 0 never start the prefills (vLLM #29644/#36553).
    With `require_uniform`, decodes are the leading requests whose non-zero query length
    equals the first request's.
    """
    qsl = cam.query_start_loc_cpu.tolist()
    query_lens = [qsl[i + 1] - qsl[i] for i in range(cam.num_reqs)]
    num_tokens = cam.num_actual_tokens
    if not query_lens:
        return 0, 0, 0, 0
    if require_uniform:
        first = query_lens[0]
        if first > decode_threshold:
            return 0, cam.num_reqs, 0, num_tokens
        boundary = next((i for i, q in enumerate(query_lens) if q not in (0, first)), cam.num_reqs)
    else:
        if query_lens[0] > decode_threshold:
            return 0, cam.num_reqs, 0, num_tokens
        boundary = next((i for i, q in enumerate(query_lens) if q > decode_threshold), cam.num_reqs)
    num_decode_tokens = qsl[boundary]
    return boundary, cam.num_reqs - boundary, num_decode_tokens, num_tokens - num_decode_tokens


def reorder_decode_first(spec: BatchSpec, decode_threshold: int = 1) -> list[int]:
    """Request order decode → extend (has context) → prefill (no context), stable.

    Padding requests (query length 0) go last.
    """

    def rank(i: int) -> int:
        q, s = spec.query_lens[i], spec.seq_lens[i]
        if q == 0:
            return 3
        if q <= decode_threshold:
            return 0
        return 1 if s > q else 2

    return sorted(range(spec.batch_size), key=rank)


def reordered(spec: BatchSpec, decode_threshold: int = 1) -> BatchSpec:
    """`spec` with its requests in `reorder_decode_first` order."""
    order = reorder_decode_first(spec, decode_threshold)
    return BatchSpec(
        tuple(spec.seq_lens[i] for i in order),
        tuple(spec.query_lens[i] for i in order),
        f"{spec.name}-reordered",
    )
