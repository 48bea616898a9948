"""A CPU stand-in for ``flashinfer`` and its batch MLA wrapper, as FlashInfer defines them.

The one double of FlashInfer for the ``flashinfer`` backend's selftests and the benchmark
peer's. It follows FlashInfer's planned wrapper (``flashinfer/mla/_batch_mla/_wrapper.py``):
keyword-only ``plan`` with ``MLAPlanMetadata.csr(...)`` metadata and the run contract it
declares (``lse_mode`` ``"none"`` / ``"base2"`` / ``"basee"``, ``scale_mode``, which an e4m3fn
cache turns into ``"kv-per-tensor"``), keyword-only ``run`` over packed 576-wide ``query`` and
``kv_cache``, bf16 q with a bf16 or e4m3fn cache, optional ``out`` / ``lse`` buffers returned
as given. Its LSE convention is FlashInfer's: ``run(..., return_lse=True)`` returns the
**base-2** LSE, the natural log only with ``return_lse_base_on_e=True``, and the plan's
``lse_mode`` must say which. It computes the kernel's arithmetic on the CPU: the cache read as
bf16 and dequantised with ``ckv_scale`` / ``kpe_scale``, fp32 attention with causal rows
aligned to the end of the context.

Every call is logged in `CALLS` and on its wrapper (``init``, ``plans``, ``runs``; the wrappers
in ``BatchMLAPagedAttentionWrapper.instances``); ``BatchMLAPagedAttentionWrapper.fault``
selects a deliberately broken run for negative controls. `install` puts the package into
``sys.modules`` (or a given mapping).
"""

from __future__ import annotations

import math
import sys
import types
from typing import Any, ClassVar

import torch

VERSION = "0.0.0+standin"
CALLS: list[tuple[str, dict[str, Any]]] = []
REQUIRED_PLAN = (
    "num_heads",
    "head_dim_ckv",
    "head_dim_kpe",
    "page_size",
    "causal",
    "sm_scale",
    "q_data_type",
    "kv_data_type",
)
FAULTS = ("drop_scale", "shift_pages")


class MLAPlanMetadata:
    """Canonical plan metadata; only the CSR form is modelled."""

    def __init__(self, **fields: torch.Tensor) -> None:
        self.__dict__.update(fields)

    @classmethod
    def csr(cls, qo_indptr, kv_indptr, kv_indices, kv_len_arr) -> MLAPlanMetadata:
        for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr)):
            if t.dtype != torch.int32 or t.dim() != 1:
                raise ValueError(f"{name} must be a 1-D int32 tensor")
        if len(qo_indptr) != len(kv_indptr) or len(kv_len_arr) != len(kv_indptr) - 1:
            raise ValueError("qo_indptr, kv_indptr and kv_len_arr describe different batches")
        return cls(
            qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_len_arr=kv_len_arr
        )


class BatchMLAPagedAttentionWrapper:
    """Plan, then run; the arithmetic of FlashInfer's fa2/fa3 MLA kernels, on the CPU."""

    instances: ClassVar[list[BatchMLAPagedAttentionWrapper]] = []
    fault: ClassVar[str | None] = None  # one of FAULTS: a deliberately broken run

    def __init__(
        self,
        float_workspace_buffer: torch.Tensor,
        use_cuda_graph: bool = False,
        *,
        backend: str = "auto",
        **buffers: torch.Tensor,
    ) -> None:
        if backend not in ("auto", "fa2", "fa3"):
            raise ValueError(f"backend {backend!r}")
        unknown = set(buffers) - {"qo_indptr", "kv_indptr", "kv_indices", "kv_len_arr"}
        if unknown:
            raise TypeError(f"__init__(): unexpected {sorted(unknown)}")
        self.init: dict[str, Any] = {
            "workspace": float_workspace_buffer,
            "use_cuda_graph": use_cuda_graph,
            "backend": backend,
            **buffers,
        }
        self.plans: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        BatchMLAPagedAttentionWrapper.instances.append(self)
        CALLS.append(("init", self.init))

    def plan(
        self,
        *,
        metadata: MLAPlanMetadata,
        lse_mode: str = "none",
        scale_mode: str = "default",
        **kw: Any,
    ) -> None:
        missing = [k for k in REQUIRED_PLAN if k not in kw]
        if missing or set(kw) - set(REQUIRED_PLAN):
            raise TypeError(f"plan(): missing {missing}, unexpected {set(kw) - set(REQUIRED_PLAN)}")
        if kw["q_data_type"] != torch.bfloat16:
            raise ValueError("fa2/fa3 MLA takes a bf16 (or fp16) q")
        if kw["kv_data_type"] not in (torch.bfloat16, torch.float8_e4m3fn):
            raise ValueError(f"kv_data_type {kw['kv_data_type']} unsupported")
        if lse_mode not in ("none", "base2", "basee"):
            raise ValueError(f"lse_mode {lse_mode!r}")
        if scale_mode not in ("default", "kv-per-tensor"):
            raise ValueError(f"scale_mode {scale_mode!r}")
        plan = {**kw, "metadata": metadata, "lse_mode": lse_mode, "scale_mode": scale_mode}
        self.plans.append(plan)
        CALLS.append(("plan", plan))
        if self.init["use_cuda_graph"]:  # FlashInfer copies the metadata into the buffers
            for name in ("qo_indptr", "kv_indptr", "kv_indices", "kv_len_arr"):
                self.init[name].copy_(getattr(metadata, name))

    def run(
        self,
        *,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        out: torch.Tensor | None = None,
        lse: torch.Tensor | None = None,
        return_lse: bool = False,
        return_lse_base_on_e: bool = False,
        ckv_scale: float | None = None,
        kpe_scale: float | None = None,
    ) -> Any:
        if not self.plans:
            raise RuntimeError("run() called before plan()")
        given = {"query": query, "kv_cache": kv_cache, "out": out, "lse": lse}
        given |= {"return_lse": return_lse, "return_lse_base_on_e": return_lse_base_on_e}
        given |= {"ckv_scale": ckv_scale, "kpe_scale": kpe_scale}
        self.runs.append({k: v for k, v in given.items() if v is not None})
        CALLS.append(("run", self.runs[-1]))
        p = self.plans[-1]
        natural = _check_lse_contract(p["lse_mode"], return_lse, return_lse_base_on_e)
        scaled = p["scale_mode"] == "kv-per-tensor" or p["kv_data_type"] == torch.float8_e4m3fn
        if scaled != (ckv_scale is not None and kpe_scale is not None):
            raise ValueError("ckv_scale and kpe_scale: required exactly for kv-per-tensor scales")
        width, heads = p["head_dim_ckv"] + p["head_dim_kpe"], p["num_heads"]
        if query.dtype != p["q_data_type"] or tuple(query.shape[1:]) != (heads, width):
            raise ValueError(f"query {query.dtype} {tuple(query.shape)}: planned for {heads}")
        if kv_cache.dtype != p["kv_data_type"] or kv_cache.shape[1:] != (p["page_size"], width):
            raise ValueError(f"kv_cache {kv_cache.dtype} {tuple(kv_cache.shape)}")
        scale = torch.ones(width)
        if scaled and self.fault != "drop_scale":
            scale[: p["head_dim_ckv"]], scale[p["head_dim_ckv"] :] = ckv_scale, kpe_scale
        cache = kv_cache.to(torch.bfloat16).float() * scale
        found_out, found_lse = self._attend(query.float(), cache.reshape(-1, width), p)
        out = torch.empty(found_out.shape, dtype=query.dtype) if out is None else out
        out.copy_(found_out)
        if not return_lse:
            return out
        lse = torch.empty(found_lse.shape, dtype=torch.float32) if lse is None else lse
        lse.copy_(found_lse if natural else found_lse / math.log(2.0))
        return out, lse

    def _attend(self, q: torch.Tensor, flat: torch.Tensor, p: dict[str, Any]):
        m = p["metadata"]
        page, ckv = p["page_size"], p["head_dim_ckv"]
        out = torch.zeros((q.shape[0], q.shape[1], ckv))
        lse = torch.full(q.shape[:2], float("-inf"))
        qo, kv = m.qo_indptr.tolist(), m.kv_indptr.tolist()
        indices = m.kv_indices.roll(1) if self.fault == "shift_pages" else m.kv_indices
        for b, length in enumerate(m.kv_len_arr.tolist()):
            q0, q1 = qo[b], qo[b + 1]
            pages = indices[kv[b] : kv[b + 1]].to(torch.int64)
            t = torch.arange(length)
            k = flat[pages[t // page] * page + t % page]
            s = torch.einsum("nhd,ld->nhl", q[q0:q1], k) * p["sm_scale"]
            if p["causal"]:  # the last query row sees the whole context
                visible = length - (q1 - q0) + 1 + torch.arange(q1 - q0)
                s = s.masked_fill((t[None, :] >= visible[:, None])[:, None, :], float("-inf"))
            lse[q0:q1] = torch.logsumexp(s, -1)
            w = torch.exp(s - lse[q0:q1, :, None]).nan_to_num(0.0)
            out[q0:q1] = torch.einsum("nhl,ld->nhd", w, k[:, :ckv])
        return out, lse


def _check_lse_contract(lse_mode: str, return_lse: bool, base_on_e: bool) -> bool:
    """Whether the run returns the natural-log LSE; raise where it breaks the plan's mode."""
    if return_lse and lse_mode == "none":
        raise ValueError("return_lse=True on a plan with lse_mode='none'")
    if return_lse and base_on_e != (lse_mode == "basee"):
        raise ValueError(f"return_lse_base_on_e={base_on_e} on a plan with lse_mode={lse_mode!r}")
    return base_on_e


def install(modules: dict[str, Any] | None = None) -> types.ModuleType:
    """Put the stand-in ``flashinfer`` and ``flashinfer.mla`` into `modules` (``sys.modules``);
    return ``flashinfer.mla``. Clears the call log, the recorded wrappers and the fault."""
    modules = sys.modules if modules is None else modules
    mla = types.ModuleType("flashinfer.mla")
    mla.MLAPlanMetadata = MLAPlanMetadata
    mla.BatchMLAPagedAttentionWrapper = BatchMLAPagedAttentionWrapper
    package = types.ModuleType("flashinfer")
    package.__version__ = VERSION
    package.mla = mla
    modules["flashinfer"], modules["flashinfer.mla"] = package, mla
    CALLS.clear()
    BatchMLAPagedAttentionWrapper.instances.clear()
    BatchMLAPagedAttentionWrapper.fault = None
    return mla
