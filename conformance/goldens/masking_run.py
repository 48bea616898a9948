"""The masking family run through a backend: its own builder and decode on the crafted batch
(`conformance.numerics.masking`) at every softmax scale the suite passes, judged exactly.

Used by tests/conformance/test_masking.py (every backend) and the engine targets' GPU
decode tests (an engine's own implementation as a backend).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from backends.base import Backend, BuilderConfig, KVCacheSpec, dtype_label
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.numerics.masking import (
    HEADS,
    JUDGED,
    QUERY_LEN,
    MaskingBatch,
    make_masking_batch,
    masking_problems,
    masking_summary,
    page_size_for,
    worst_errors,
)
from conformance.numerics.softmax_scale import DEFAULT_SOFTMAX_SCALE, SOFTMAX_SCALES
from conformance.stubs.protocol import MLAAttentionLayer

SHOWN = 6
"""Problems shown per failing scale (the count of the rest follows)."""


def decode_masking_batch(
    backend: Backend, batch: MaskingBatch, q_dtype: torch.dtype, layer_name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The backend's own builder and decode on the crafted batch."""
    kv_dtype = batch.kv_cache.dtype
    config = BuilderConfig(
        model=DEEPSEEK_R1,
        num_heads=HEADS,
        kv_cache=KVCacheSpec(
            block_size=batch.page_size, dtype=kv_dtype, num_blocks=batch.num_blocks
        ),
        q_dtype=q_dtype,
        max_num_seqs=8,
        max_model_len=1024,
        decode_threshold=QUERY_LEN,
        device=str(backend.device),
    )
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=HEADS)
    builder = backend.make_builder(config, [layer_name], {layer_name: layer})
    meta = builder.build(batch.cam)
    assert meta.decode is not None, f"the builder produced no decode metadata: {meta}"
    return backend.decode(
        batch.q,
        batch.kv_cache,
        meta.decode,
        sm_scale=batch.sm_scale,
        q_scale=batch.q_scale,
        kv_scale=batch.kv_scale,
    )


def masking_failures(
    backend: Backend,
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
    layer_name: str,
    record: Callable[[str, float], None],
    *,
    parts: tuple[str, ...] = JUDGED,
) -> list[str]:
    """One line (and its problems) per softmax scale at which a token outside a row's window
    reached the output, or one inside it was hidden; errors and bounds go to `record`;
    `parts` judges the output or the LSE alone (`masking_problems`)."""
    failures = []
    page_size = page_size_for(getattr(backend, "page_sizes", None))
    for scale_name, sm_scale in SOFTMAX_SCALES.items():
        batch = make_masking_batch(
            q_dtype, kv_dtype, backend.device, page_size=page_size, sm_scale=sm_scale
        )
        out, lse = decode_masking_batch(backend, batch, q_dtype, layer_name)
        prefix = "masking" if scale_name == DEFAULT_SOFTMAX_SCALE else f"masking_{scale_name}"
        for name, value in worst_errors(batch, out, lse).items():
            record(f"{prefix}_{name}", value)
        record(f"{prefix}_lse_bound", batch.lse_bound)
        record(f"{prefix}_out_bound", batch.out_bound)
        problems = masking_problems(batch, out, lse, parts=parts)
        if problems:
            lines = "\n".join(f"  {p.text}" for p in problems[:SHOWN])
            more = f"\n  ... and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
            failures.append(
                f"sm_scale {sm_scale:.6g} ({scale_name}), q {dtype_label(q_dtype)}, kv "
                f"{dtype_label(kv_dtype)}: {len(problems)} problem(s) in {len(batch.rows)} query "
                f"rows: {masking_summary(batch, problems)}:\n{lines}{more}"
            )
    return failures
