"""A stand-in ``flashinfer`` package for the benchmark's selftests (no GPU, no FlashInfer).

`FakeWrapper` records every call the benchmark's FlashInfer peer makes (wrapper
construction, ``plan``, ``run``) and computes MLA decode the way FlashInfer's FA backends
define it: the packed 576-wide q and cache split into 512 + 64, an fp8 cache dequantised with
``ckv_scale`` / ``kpe_scale``, causal rows aligned to the end of the context, natural-log LSE.
`FakeWrapper.fault` selects a deliberately broken run for the negative controls. `install`
puts the package into ``sys.modules``.
"""

from __future__ import annotations

import sys
import types
from typing import Any, ClassVar

import torch

VERSION = "0.0.0+standin"


class FakePlanMetadata:
    """Stand-in of ``flashinfer.mla.MLAPlanMetadata`` (the CSR form only)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    @classmethod
    def csr(cls, qo_indptr: Any, kv_indptr: Any, kv_indices: Any, kv_len_arr: Any) -> Any:
        return cls(
            qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_len_arr=kv_len_arr
        )


class FakeWrapper:
    """Stand-in of ``BatchMLAPagedAttentionWrapper``: records calls, computes the decode."""

    instances: ClassVar[list[FakeWrapper]] = []
    fault: ClassVar[str | None] = None  # "drop_scale" or "shift_pages": deliberately broken runs

    def __init__(self, workspace: torch.Tensor, use_cuda_graph: bool = False, **kw: Any) -> None:
        self.init = {"workspace": workspace, "use_cuda_graph": use_cuda_graph, **kw}
        self.plans: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        FakeWrapper.instances.append(self)

    def plan(self, **kw: Any) -> None:
        self.plans.append(kw)
        meta = kw["metadata"]
        if self.init["use_cuda_graph"]:  # FlashInfer copies the metadata into the buffers
            for name in ("qo_indptr", "kv_indptr", "kv_indices", "kv_len_arr"):
                self.init[name].copy_(getattr(meta, name))

    def run(self, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.runs.append(kw)
        plan, meta = self.plans[-1], self.plans[-1]["metadata"]
        ckv_w, kpe_w = plan["head_dim_ckv"], plan["head_dim_kpe"]
        q, cache = kw["query"].float(), kw["kv_cache"]
        ckv = cache[..., :ckv_w].to(torch.bfloat16).float()
        kpe = cache[..., ckv_w:].to(torch.bfloat16).float()
        if plan["scale_mode"] == "kv-per-tensor" and self.fault != "drop_scale":
            ckv, kpe = ckv * kw["ckv_scale"], kpe * kw["kpe_scale"]
        out, lse = kw["out"], kw["lse"]
        indices = meta.kv_indices.roll(1) if self.fault == "shift_pages" else meta.kv_indices
        for b in range(meta.kv_len_arr.numel()):
            q0, q1 = int(meta.qo_indptr[b]), int(meta.qo_indptr[b + 1])
            pages = indices[int(meta.kv_indptr[b]) : int(meta.kv_indptr[b + 1])].long()
            n = int(meta.kv_len_arr[b])
            k_lat = ckv[pages].reshape(-1, ckv_w)[:n]
            k_rope = kpe[pages].reshape(-1, kpe_w)[:n]
            s = (q[q0:q1, :, :ckv_w] @ k_lat.T + q[q0:q1, :, ckv_w:] @ k_rope.T) * plan["sm_scale"]
            last = n - (q1 - q0) + torch.arange(q1 - q0)  # causal, aligned to the context end
            s = s.masked_fill(torch.arange(n)[None, None, :] > last[:, None, None], -torch.inf)
            lse[q0:q1] = torch.logsumexp(s, -1)
            out[q0:q1] = (torch.softmax(s, -1) @ k_lat).to(out.dtype)
        return out, lse


def install(modules: dict[str, Any] | None = None) -> types.ModuleType:
    """Put the stand-in ``flashinfer`` and ``flashinfer.mla`` into `modules` (``sys.modules``);
    return ``flashinfer.mla``. Resets the recorded wrappers and the fault."""
    modules = sys.modules if modules is None else modules
    mla = types.ModuleType("flashinfer.mla")
    mla.BatchMLAPagedAttentionWrapper = FakeWrapper
    mla.MLAPlanMetadata = FakePlanMetadata
    package = types.ModuleType("flashinfer")
    package.__version__ = VERSION
    package.mla = mla
    modules["flashinfer"], modules["flashinfer.mla"] = package, mla
    FakeWrapper.instances.clear()
    FakeWrapper.fault = None
    return mla
