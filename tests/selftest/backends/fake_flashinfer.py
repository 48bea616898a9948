"""A CPU stand-in for ``flashinfer.mla`` (the parts the ``flashinfer`` backend calls).

It checks its arguments as FlashInfer 0.7's batch MLA wrapper does (keyword-only plan and
run, canonical CSR metadata, bf16 q with a bf16 or e4m3fn cache, fp8 scales required for
an fp8 cache and refused otherwise, packed 576-wide q and cache rows) and computes what
its kernel computes: the cache dequantised into bf16 operands (times ``ckv_scale`` /
``kpe_scale``), fp32 attention with bottom-right causal alignment, and a **base-2** LSE.
Every call is logged in `CALLS`.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch

CALLS: list[tuple[str, dict[str, Any]]] = []


class MLAPlanMetadata:
    """Canonical metadata; only the CSR form is modelled."""

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

    def __init__(self, float_workspace_buffer: torch.Tensor, *, backend: str = "auto") -> None:
        if backend not in ("auto", "fa2", "fa3"):
            raise ValueError(f"backend {backend!r}")
        CALLS.append(("init", {"backend": backend, "workspace": float_workspace_buffer.numel()}))
        self._plan: dict[str, Any] | None = None

    def plan(self, *, metadata: MLAPlanMetadata, lse_mode: str = "none", **kw: Any) -> None:
        required = ("num_heads", "head_dim_ckv", "head_dim_kpe", "page_size", "causal")
        required += ("sm_scale", "q_data_type", "kv_data_type")
        missing = [k for k in required if k not in kw]
        if missing or set(kw) - set(required):
            raise TypeError(f"plan(): missing {missing}, unexpected {set(kw) - set(required)}")
        if kw["q_data_type"] != torch.bfloat16:
            raise ValueError("fa2/fa3 MLA takes a bf16 (or fp16) q")
        if kw["kv_data_type"] not in (torch.bfloat16, torch.float8_e4m3fn):
            raise ValueError(f"kv_data_type {kw['kv_data_type']} unsupported")
        if lse_mode not in ("none", "base2", "basee"):
            raise ValueError(f"lse_mode {lse_mode!r}")
        CALLS.append(("plan", {**kw, "lse_mode": lse_mode, "metadata": metadata}))
        self._plan = {**kw, "lse_mode": lse_mode, "metadata": metadata}

    def run(
        self,
        *,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        return_lse: bool = False,
        ckv_scale: float | None = None,
        kpe_scale: float | None = None,
    ) -> Any:
        p = self._plan
        if p is None:
            raise RuntimeError("run() called before plan()")
        if return_lse != (p["lse_mode"] != "none"):
            raise ValueError("LSE mode differs from the plan's")
        fp8 = p["kv_data_type"] == torch.float8_e4m3fn
        if fp8 != (ckv_scale is not None and kpe_scale is not None):
            raise ValueError("ckv_scale and kpe_scale: required exactly for an fp8 cache")
        width = p["head_dim_ckv"] + p["head_dim_kpe"]
        heads = p["num_heads"]
        if query.dtype != p["q_data_type"] or tuple(query.shape[1:]) != (heads, width):
            raise ValueError(f"query {query.dtype} {tuple(query.shape)}: planned for {heads}")
        if kv_cache.dtype != p["kv_data_type"] or kv_cache.shape[1:] != (p["page_size"], width):
            raise ValueError(f"kv_cache {kv_cache.dtype} {tuple(kv_cache.shape)}")
        CALLS.append(("run", {"ckv_scale": ckv_scale, "kpe_scale": kpe_scale, "q": query.shape}))
        scale = torch.ones(width)
        scale[: p["head_dim_ckv"]] = ckv_scale or 1.0
        scale[p["head_dim_ckv"] :] = kpe_scale or 1.0
        cache = (kv_cache.float() * scale).to(torch.bfloat16).float()  # bf16 operands
        out, lse = self._attend(query.float(), cache.reshape(-1, width), p)
        return out.to(torch.bfloat16), lse / math.log(2.0)  # base-2 LSE

    @staticmethod
    def _attend(q: torch.Tensor, flat: torch.Tensor, p: dict[str, Any]):
        m = p["metadata"]
        page, ckv = p["page_size"], p["head_dim_ckv"]
        out = torch.zeros((q.shape[0], q.shape[1], ckv))
        lse = torch.full(q.shape[:2], float("-inf"))
        qo, kv = m.qo_indptr.tolist(), m.kv_indptr.tolist()
        for b, length in enumerate(m.kv_len_arr.tolist()):
            q0, q1 = qo[b], qo[b + 1]
            pages = m.kv_indices[kv[b] : kv[b + 1]].to(torch.int64)
            t = torch.arange(length)
            k = flat[pages[t // page] * page + t % page]
            s = torch.einsum("nhd,ld->nhl", q[q0:q1], k) * p["sm_scale"]
            if p["causal"]:
                visible = length - (q1 - q0) + 1 + torch.arange(q1 - q0)
                s = s.masked_fill((t[None, :] >= visible[:, None])[:, None, :], float("-inf"))
            lse[q0:q1] = torch.logsumexp(s, -1)
            w = torch.exp(s - lse[q0:q1, :, None]).nan_to_num(0.0)
            out[q0:q1] = torch.einsum("nhl,ld->nhd", w, k[:, :ckv])
        return out, lse


def module() -> types.ModuleType:
    """A ``flashinfer`` package object with the ``mla`` submodule."""
    mla = types.ModuleType("flashinfer.mla")
    mla.MLAPlanMetadata = MLAPlanMetadata
    mla.BatchMLAPagedAttentionWrapper = BatchMLAPagedAttentionWrapper
    package = types.ModuleType("flashinfer")
    package.mla = mla
    return package
