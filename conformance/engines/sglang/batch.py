"""SGLang's `ForwardBatch` from the suite's `BatchSpec`, and the batch kinds of the sweep.

Request ``i`` owns the token slots ``page + i * MAX_CONTEXT_LEN + position`` (page-aligned,
slot 0..page-1 unused), written into the runner's ``req_to_token`` table as SGLang's
scheduler does. A batch whose every request has one query token is ``DECODE``; one
without decode rows is ``EXTEND``; one with both is ``MIXED`` (chunked prefill). The
required fields of `ForwardBatch` go to its constructor; the optional ones the batch
carries (`OPTIONAL_SET`) are set afterwards, each unless omitted (leave-one-out).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from conformance.engines.sglang.adapter import MAX_CONTEXT_LEN, record_class
from conformance.metadata.batch import BATCH_SPECS, BatchSpec

KIND_SPECS: dict[str, BatchSpec] = {
    "decode": BATCH_SPECS["small_decode"],
    "mixed": BATCH_SPECS["mixed_small"],
    "prefill": BATCH_SPECS["extend"],
}
EXTEND_FIELDS = (
    "extend_prefix_lens",
    "extend_prefix_lens_cpu",
    "extend_seq_lens",
    "extend_seq_lens_cpu",
    "extend_start_loc",
    "extend_num_tokens",
)
OPTIONAL_SET = ("seq_lens_cpu", "positions", *EXTEND_FIELDS)
"""The optional `ForwardBatch` fields the suite's batches carry (extend ones on extends)."""


def batch_kind(spec: BatchSpec) -> str:
    """decode (every row one token), prefill (none) or mixed."""
    decodes = [q == 1 for q in spec.query_lens]
    return "decode" if all(decodes) else "prefill" if not any(decodes) else "mixed"


def forward_mode(spec: BatchSpec) -> Any:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return {"decode": ForwardMode.DECODE, "mixed": ForwardMode.MIXED}.get(
        batch_kind(spec), ForwardMode.EXTEND
    )


def token_slot(request: int, position: int, page: int) -> int:
    return page + request * MAX_CONTEXT_LEN + position


def forward_batch(spec: BatchSpec, runner: Any, *, omit: Iterable[str] = ()) -> Any:
    """SGLang's `ForwardBatch` of `spec` over `runner`'s pools, less the optional `omit`."""
    omitted = set(omit)
    unknown = omitted - set(OPTIONAL_SET)
    if unknown:
        raise ValueError(f"ForwardBatch: the suite's batches set no optional field {unknown}")
    page = runner.page_size
    if len(spec.seq_lens) > runner.req_to_token_pool.size:
        raise ValueError(f"{spec.name}: {len(spec.seq_lens)} requests, the pool holds fewer")
    prefix = [s - q for s, q in zip(spec.seq_lens, spec.query_lens, strict=True)]
    positions, out_locs = [], []
    table = runner.req_to_token_pool.req_to_token
    for request, (seq_len, start) in enumerate(zip(spec.seq_lens, prefix, strict=True)):
        table[request, :seq_len] = torch.tensor(
            [token_slot(request, p, page) for p in range(seq_len)], dtype=table.dtype
        )
        positions += range(start, seq_len)
        out_locs += [token_slot(request, p, page) for p in range(start, seq_len)]
    seq_lens = torch.tensor(spec.seq_lens, dtype=torch.int32)
    batch = record_class()(
        forward_mode=forward_mode(spec),
        batch_size=spec.batch_size,
        input_ids=torch.zeros(spec.num_tokens(), dtype=torch.int64),
        req_pool_indices=torch.arange(spec.batch_size, dtype=torch.int32),
        seq_lens=seq_lens,
        out_cache_loc=torch.tensor(out_locs, dtype=torch.int64),
        seq_lens_sum=sum(spec.seq_lens),
    )
    query = torch.tensor(spec.query_lens, dtype=torch.int32)
    values: dict[str, Any] = {
        "seq_lens_cpu": seq_lens.clone(),
        "positions": torch.tensor(positions, dtype=torch.int64),
    }
    if batch.forward_mode.is_extend():
        values |= {
            "extend_prefix_lens": torch.tensor(prefix, dtype=torch.int32),
            "extend_prefix_lens_cpu": list(prefix),
            "extend_seq_lens": query,
            "extend_seq_lens_cpu": list(spec.query_lens),
            "extend_start_loc": torch.cumsum(query, 0, dtype=torch.int32) - query,
            "extend_num_tokens": spec.num_tokens(),
        }
    for name, value in values.items():
        if name not in omitted:
            setattr(batch, name, value)
    runner.kv_index_translator.bind_own_plan(batch)
    return batch
