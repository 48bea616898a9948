"""Family B on SGLang's layer: what each backend's forward reads from its `RadixAttention`.

SGLang's `RadixAttention.forward` hands itself to the backend (``backend.forward(q, k, v,
layer, forward_batch)``). `forward_reads` wraps a real `RadixAttention` in the suite's
recorder and runs one decode forward of a backend whose metadata was built; `layer_facts`
adds leave-one-out (an attribute removed from the layer's instance dict) and returns both
per backend, for the facts file's provenance.
"""

from __future__ import annotations

from typing import Any

import torch

from conformance.engines import checks
from conformance.engines.sglang.adapter import DIMS, LAYER_ID
from conformance.stubs.recorder import log_of, record_layer

FORWARD_KIND = "decode"


def make_layer(heads: int, *, omit: tuple[str, ...] = ()) -> Any:
    """A real `RadixAttention` as DeepSeek's MLA makes its ``attn_mqa``, less `omit`."""
    from sglang.srt.layers.radix_attention import RadixAttention

    width = DIMS.kv_lora_rank + DIMS.qk_rope_head_dim
    layer = RadixAttention(
        num_heads=heads,
        head_dim=width,
        scaling=DIMS.qk_head_dim**-0.5,
        num_kv_heads=1,
        layer_id=LAYER_ID,
        v_head_dim=DIMS.kv_lora_rank,
    )
    for name in omit:
        del layer.__dict__[name]
    return layer


def decode_forward(run: Any, name: str, layer: Any, *, q_dtype: torch.dtype = torch.bfloat16):
    """Build `name`'s metadata for the decode batch and run its forward over `layer`."""
    backend = run.construct(name)
    batch = run.batch(name, FORWARD_KIND)
    run.build(backend, batch)
    tokens = int(batch.out_cache_loc.numel())
    width = DIMS.kv_lora_rank + DIMS.qk_rope_head_dim
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(tokens, run.heads * width, generator=generator).to(q_dtype)
    k = torch.randn(tokens, 1, width, generator=generator).to(torch.bfloat16)
    v = k[..., : DIMS.kv_lora_rank]
    from conformance.engines.sglang.aiter_standin import device_to_cpu

    with device_to_cpu():
        return backend.forward(q, k, v, layer, batch, save_kv_cache=True)


def forward_reads(run: Any, name: str) -> frozenset[str]:
    """The layer attributes `name`'s decode forward reads."""
    proxy = record_layer(make_layer(run.heads), name=f"{name} RadixAttention", strict=False)
    decode_forward(run, name, proxy)
    return log_of(proxy).reads()


def layer_facts(run: Any, built: list[str]) -> dict[str, Any]:
    """``layer_reads`` and ``layer_required`` per backend, and why a backend was not run."""
    reads: dict[str, list[str]] = {}
    required: dict[str, dict[str, str]] = {}
    not_run: dict[str, str] = {}
    for name in built:
        try:
            seen = forward_reads(run, name)
        except Exception as error:  # the engine's own forward: a failure is a finding
            not_run[name] = checks.one_line(error)
            continue
        reads[name] = sorted(seen)
        own = set(vars(make_layer(run.heads)))
        required[name] = {}
        for attribute in checks.top_level(seen):
            if attribute not in own:
                continue
            layer = make_layer(run.heads, omit=(attribute,))
            outcome = checks.attempt(lambda lay=layer, n=name: decode_forward(run, n, lay))
            if not outcome.ok:
                required[name][attribute] = outcome.error
    return {"layer_reads": reads, "layer_required": required, "layer_not_run": not_run}
