"""FlashInfer's MLA decode as a peer, timed beside ours when ``flashinfer`` imports.

Never a dependency: `load` returns the reason when it does not import, and the run records it.
`flashinfer.mla.BatchMLAPagedAttentionWrapper` with backend ``fa3`` or ``fa2`` gets the
same inputs as ours: the same page table (CSR ``kv_indptr`` / ``kv_indices`` and the
per-request KV lengths), the same q (bf16; for an fp8 case the exactly dequantised e4m3 q,
since FlashInfer's fp8 path takes bf16 q with an e4m3 KV cache) and the same cache (bf16, or
e4m3 with the per-tensor scale passed as ``ckv_scale`` = ``kpe_scale``). q and cache are the
packed 576-wide tensors, which FlashInfer splits into its 512 + 64 views without a copy; it
plans with CUDA-graph buffers of its own, writes into preallocated out and natural-log LSE.
"""

from __future__ import annotations

from typing import Any

from benchmarks.decode.cases import PAGE_SIZE, SM_SCALE, Case
from benchmarks.decode.impls import Impl
from benchmarks.decode.inputs import Batch, make_batch

BACKENDS = ("fa3", "fa2")
WORKSPACE_BYTES = 128 << 20  # FlashInfer's suggested float workspace
LATENT_DIM, ROPE_DIM = 512, 64


def load() -> tuple[Any | None, str]:
    """(the ``flashinfer.mla`` module, FlashInfer's version), or (None, why it is not usable)."""
    try:
        import flashinfer
        from flashinfer import mla
    except Exception as exc:  # not installed, or a build that does not load here
        return None, f"flashinfer does not import: {type(exc).__name__}: {exc}"[:300]
    missing = [
        n for n in ("BatchMLAPagedAttentionWrapper", "MLAPlanMetadata") if not hasattr(mla, n)
    ]
    if missing:
        return None, f"flashinfer.mla lacks {', '.join(missing)} (an unsupported version)"
    return mla, str(getattr(flashinfer, "__version__", "unknown"))


class FlashInferPeer:
    """Builds the FlashInfer `Impl` of a batch, for one FlashInfer backend at a time."""

    def __init__(self, mla: Any, version: str, device: Any) -> None:
        import torch

        self.mla = mla
        self.version = version
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)

    def plan_kwargs(self, batch: Batch) -> dict[str, Any]:
        """Keyword arguments of ``wrapper.plan`` for `batch`."""
        import torch

        fp8 = batch.kv_cache.dtype != torch.bfloat16
        return {
            "metadata": self.mla.MLAPlanMetadata.csr(
                qo_indptr=batch.qo_indptr.to(torch.int32),
                kv_indptr=batch.kv_indptr.to(torch.int32),
                kv_indices=batch.kv_indices.to(torch.int32),
                kv_len_arr=batch.seq_lens.to(torch.int32),
            ),
            "num_heads": batch.case.heads,
            "head_dim_ckv": LATENT_DIM,
            "head_dim_kpe": ROPE_DIM,
            "page_size": PAGE_SIZE,
            "causal": True,
            "sm_scale": SM_SCALE,
            "q_data_type": torch.bfloat16,
            "kv_data_type": batch.kv_cache.dtype,
            "lse_mode": "basee",
            "scale_mode": "kv-per-tensor" if fp8 else "default",
        }

    def impl(self, batch: Batch, backend: str) -> Impl:
        """Plan `batch` for `backend` (JIT-compiling its module on first use); the timed run."""
        import torch

        if backend not in BACKENDS:
            raise ValueError(f"FlashInfer backend must be one of {BACKENDS}, got {backend!r}")
        plan = self.plan_kwargs(batch)
        meta = plan["metadata"]
        # CUDA-graph mode: FlashInfer copies the metadata into these buffers at plan time.
        wrapper = self.mla.BatchMLAPagedAttentionWrapper(
            self.workspace,
            use_cuda_graph=True,
            qo_indptr=torch.empty_like(meta.qo_indptr),
            kv_indptr=torch.empty_like(meta.kv_indptr),
            kv_indices=torch.empty_like(meta.kv_indices),
            kv_len_arr=torch.empty_like(meta.kv_len_arr),
            backend=backend,
        )
        wrapper.plan(**plan)
        out, lse = batch.empty_outputs()
        scales = {}
        if plan["scale_mode"] == "kv-per-tensor":
            scales = {"ckv_scale": batch.kv_scale, "kpe_scale": batch.kv_scale}

        def run() -> Any:
            return wrapper.run(
                query=batch.q_bf16, kv_cache=batch.kv_cache, out=out, lse=lse, return_lse=True,
                return_lse_base_on_e=True, **scales,
            )  # fmt: skip

        return Impl(run, info={"flashinfer": self.version, "backend": backend})

    def warm_up(self, kv_formats: set[str], device: Any) -> dict[str, str]:
        """JIT-compile the modules the run needs (tiny batches); ``{backend-format: status}``."""
        status = {}
        for backend in BACKENDS:
            for kv in sorted(kv_formats):
                batch = make_batch(Case(16, kv, 2, 300, 1), device)
                try:
                    self.impl(batch, backend).run()
                    status[f"{backend}-{kv}"] = "ok"
                except Exception as exc:  # recorded; its cases then record the error again
                    status[f"{backend}-{kv}"] = f"{type(exc).__name__}: {exc}"[:300]
        return status
