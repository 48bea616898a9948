"""DeepSeek's FlashMLA dense decode as a peer, timed beside ours where its ops are found.

Never a dependency: the ops come from `backends.flashmla.ops` (FlashMLA's own build, vLLM's
bundled extensions or ``MLA_FLASHMLA_DIR``), and where none is found `load` returns why. It
gets the same inputs as ours: the same 64-token pages through the per-request block table
and kv lengths, the same q and cache — bf16 over bf16 with ``dense_decode_fwd``, e4m3 over
e4m3 with ``fwd_kvcache_mla_fp8`` and the per-tensor scales as its descales. Its tile
schedule is made before timing, once per batch (for bf16 by the first call, as FlashMLA
does), and the timed call writes into a preallocated output.
"""

from __future__ import annotations

from typing import Any

from benchmarks.decode.cases import SM_SCALE
from benchmarks.decode.impls import Impl
from benchmarks.decode.inputs import Batch

HEAD_DIM, HEAD_DIM_V = 576, 512


def load() -> tuple[Any | None, str]:
    """(`backends.flashmla.ops.FlashMLAOps`, where they came from), or (None, why not)."""
    from backends.flashmla.ops import FlashMLAOps, find_ops

    found = find_ops()
    if isinstance(found, FlashMLAOps):
        return found, found.source
    return None, found.reason


class FlashMLAPeer:
    """Builds the FlashMLA `Impl` of a batch."""

    def __init__(self, ops: Any, source: str) -> None:
        self.ops = ops
        self.source = source

    def impl(self, batch: Batch) -> Impl:
        """The timed call of `batch` (its schedule made first); ValueError for e4m3 without
        FlashMLA's e4m3 extension."""
        import torch

        case = batch.case
        b, s_q, heads = case.batch, case.q_len, case.heads
        q = batch.q.view(b, s_q, heads, HEAD_DIM)
        cache = batch.kv_cache.unsqueeze(-2)
        seq, table = batch.seq_lens.to(torch.int32), batch.block_table.to(torch.int32)
        info = {"flashmla": self.source}
        if batch.kv_cache.dtype != torch.bfloat16:
            if self.ops.fp8 is None:
                raise ValueError("FlashMLA's e4m3 extension (_flashmla_extension_C) is absent")
            fp8 = self.ops.fp8
            meta, splits = fp8.get_mla_decoding_metadata_dense_fp8(seq, s_q * heads, 1)
            descale = [
                torch.tensor([s], dtype=torch.float32, device=q.device)
                for s in (batch.q_scale, batch.kv_scale)
            ]

            def run() -> Any:
                return fp8.fwd_kvcache_mla_fp8(
                    q, cache, HEAD_DIM_V, seq, table, SM_SCALE, True, meta, splits, *descale
                )

            return Impl(run, outputs=_suite_layout, info=info)
        dense = self.ops.dense
        # FlashMLA allocates the output itself: with several query tokens it folds them into
        # the heads and checks a given buffer against that folded shape
        first = dense.dense_decode_fwd(
            q, cache, HEAD_DIM_V, seq, table, SM_SCALE, True, None, None, None
        )
        meta, splits = first[2], first[3]

        def run_bf16() -> Any:
            return dense.dense_decode_fwd(
                q, cache, HEAD_DIM_V, seq, table, SM_SCALE, True, meta, splits, None
            )[:2]

        return Impl(run_bf16, outputs=_suite_layout, info=info)


def _suite_layout(result: Any) -> tuple[Any, Any]:
    """FlashMLA's ``(out [b, s_q, h, 512], lse [b, h, s_q])`` as ``[rows, h, ...]``."""
    out, lse = result
    heads = out.shape[2]
    return out.reshape(-1, heads, HEAD_DIM_V), lse.transpose(1, 2).reshape(-1, heads)
