"""The masking contract, for every backend: no token outside a row's causal window counts.

Independent of numerics: on a crafted paged cache (`conformance.numerics.masking`) every
kv slot a query row must not see — past its causal window, past its sequence's end, in an
unused or the null block — holds a sentinel whose score would dominate the row and whose
value vector is far from every honest value. Every token a row may see scores exactly 0,
so the exact LSE is ``ln(visible tokens)`` and the exact output the mean of their values;
a single leaked token moves either by many times the derived bound, a token wrongly hidden
moves the LSE past its bound; a row whose LSE is exact but whose output is off by the kv
scale is reported as such, not as a mask fault. Each test decodes the batch at every softmax
scale the suite passes (1/√576 and DeepSeek-V3's, `conformance.numerics.softmax_scale`): the
exact result does not depend on it, a mask that hides by a finite bias does. It runs for
every q and KV dtype pair the backend declares (bf16 q over any cache, fp8 q over the same
fp8 flavour; fp8 with per-tensor scales 0.5 and 2), through the backend's own builder and
decode, in the page size its kernel reads (`Backend.page_sizes`); the harness skips the other
pairs as not applicable (`conformance.applicability`).
"""

from __future__ import annotations

import pytest
import torch

from backends.base import Backend, BuilderConfig, KVCacheSpec, dtype_label
from conformance.applicability import dtype_pair_id
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.numerics.masking import (
    HEADS,
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

DTYPES = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# The pairs an MLA decode takes, as in the golden cases: bf16 q over any cache, fp8 q over a
# cache of the same fp8 flavour (fp8 q over a bf16 cache is no persistent MLA combination).
PAIRS = [(q, kv) for q in DTYPES for kv in DTYPES if q == torch.bfloat16 or q == kv]
SHOWN = 6


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


@pytest.mark.parametrize(
    ("q_dtype", "kv_dtype"),
    PAIRS,
    ids=[dtype_pair_id(q, kv) for q, kv in PAIRS],
)
def test_no_token_outside_the_causal_window_reaches_the_output(
    q_dtype: torch.dtype, kv_dtype: torch.dtype, backend: Backend, layer_name: str, record_errors
) -> None:
    failures = []
    page_size = page_size_for(getattr(backend, "page_sizes", None))
    for scale_name, sm_scale in SOFTMAX_SCALES.items():
        batch = make_masking_batch(
            q_dtype, kv_dtype, backend.device, page_size=page_size, sm_scale=sm_scale
        )
        out, lse = decode_masking_batch(backend, batch, q_dtype, layer_name)
        prefix = "masking" if scale_name == DEFAULT_SOFTMAX_SCALE else f"masking_{scale_name}"
        for name, value in worst_errors(batch, out, lse).items():
            record_errors(f"{prefix}_{name}", value)
        record_errors(f"{prefix}_lse_bound", batch.lse_bound)
        record_errors(f"{prefix}_out_bound", batch.out_bound)
        problems = masking_problems(batch, out, lse)
        if problems:
            lines = "\n".join(f"  {p.text}" for p in problems[:SHOWN])
            more = f"\n  ... and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
            failures.append(
                f"sm_scale {sm_scale:.6g} ({scale_name}), q {dtype_label(q_dtype)}, kv "
                f"{dtype_label(kv_dtype)}: {len(problems)} problem(s) in {len(batch.rows)} query "
                f"rows: {masking_summary(batch, problems)}:\n{lines}{more}"
            )
    if failures:
        pytest.fail("\n".join(failures))
