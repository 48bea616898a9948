"""Batch metadata for the decode benchmarks, built the way serving code builds it.

This is a `CommonAttentionMetadata` construction site of its own (like vLLM's
``benchmarks/attention_benchmarks/mla_runner.py``, where #40844 happened): it assembles
the record directly from sequence lengths, so the audits and the metadata family see it.
"""

from __future__ import annotations

import torch

from conformance.metadata.record import CommonAttentionMetadata


def build_decode_metadata(
    seq_lens: list[int],
    *,
    query_len: int,
    block_size: int,
    device: torch.device | str,
    seed: int = 0,
) -> CommonAttentionMetadata:
    """Uniform decode batch (`query_len` tokens per request) over shuffled pages."""
    gen = torch.Generator().manual_seed(seed)
    pages = [-(-s // block_size) for s in seq_lens]
    order = torch.randperm(sum(pages), generator=gen).to(torch.int32) + 1
    table = torch.zeros((len(seq_lens), max(pages)), dtype=torch.int32)
    cursor = 0
    for r, n in enumerate(pages):
        table[r, :n] = order[cursor : cursor + n]
        cursor += n
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    qsl = torch.arange(len(seq_lens) + 1, dtype=torch.int32) * query_len
    pos = (seq[:, None] - query_len + torch.arange(query_len)).to(torch.int64)
    slots = table.to(torch.int64).gather(1, pos // block_size) * block_size + pos % block_size
    dev = torch.device(device)
    return CommonAttentionMetadata(
        query_start_loc=qsl.to(dev),
        query_start_loc_cpu=qsl,
        seq_lens=seq.to(dev),
        num_reqs=len(seq_lens),
        num_actual_tokens=len(seq_lens) * query_len,
        max_query_len=query_len,
        max_seq_len=max(seq_lens),
        block_table_tensor=table.to(dev),
        slot_mapping=slots.flatten().to(dev),
        seq_lens_cpu_upper_bound=seq.clone(),
        positions=pos.flatten().to(dev),
    )
