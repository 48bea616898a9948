"""The ``aiter`` that vLLM's ROCM_AITER_MLA builder imports on a CPU: the suite's planner.

vLLM's `AiterMLAMetadataBuilder` sizes its persistent-decode buffers with
``aiter.get_mla_metadata_info_v1`` and fills them with ``aiter.get_mla_metadata_v1``. On a
machine without AMD AITER, `install_standin` puts a module ``aiter`` into ``sys.modules``
whose two functions answer with the suite's reference (`metadata_buffer_sizes`,
`plan_persistent_decode`), with AITER's signatures; every call is kept in `AiterStandin.calls`
so the engine's planner arguments (#46997: the run's fp8 dtypes) can be checked. The module
carries ``__standin__ = True``; nothing obtained with it is reported as an AITER run.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.persistent.plan import WorkPlan
from conformance.persistent.planner import plan_persistent_decode
from conformance.persistent.sizing import metadata_buffer_sizes

MODULES = ("aiter", "aiter.dtypes")


@dataclass(frozen=True)
class PlannerCall:
    """One call of ``get_mla_metadata_v1``: its keyword view and the plan it produced."""

    arguments: dict[str, Any]
    plan: WorkPlan


@dataclass
class AiterStandin:
    """AITER's planner API for one fake device (``arch``, ``num_cus``)."""

    arch: str
    num_cus: int
    fp8: torch.dtype
    calls: list[PlannerCall] = field(default_factory=list)
    sizing_calls: list[dict[str, Any]] = field(default_factory=list)

    def get_mla_metadata_info_v1(
        self,
        batch_size: int,
        max_seqlen_qo: int,
        num_head_qo: int,
        q_dtype: torch.dtype,
        kv_dtype: torch.dtype,
        is_sparse: bool,
        fast_mode: bool = True,
        num_kv_splits: int = 32,
        intra_batch_mode: bool = False,
        max_split_per_batch: int = -1,
    ) -> tuple[tuple[Any, torch.dtype], ...]:
        """Six ``(shape, dtype)`` pairs, 1-D shapes as bare ints, as AITER returns them."""
        self.sizing_calls.append(dict(locals(), self=None))
        sizes = metadata_buffer_sizes(
            batch_size,
            max_seqlen_qo,
            num_head_qo,
            q_dtype if q_dtype in (self.fp8, torch.bfloat16) else torch.float16,
            kv_dtype if kv_dtype in (self.fp8, torch.bfloat16) else torch.float16,
            arch=self.arch,
            num_cus=self.num_cus,
            is_sparse=is_sparse,
            fast_mode=fast_mode,
            max_split_per_batch=max_split_per_batch,
        )
        return tuple((shape[0] if len(shape) == 1 else shape, dtype) for shape, dtype in sizes)

    def get_mla_metadata_v1(
        self,
        seqlens_qo_indptr: torch.Tensor,
        seqlens_kv_indptr: torch.Tensor,
        kv_last_page_lens: torch.Tensor,
        num_heads_per_head_k: int,
        num_heads_k: int,
        is_causal: bool,
        work_metadata_ptrs: torch.Tensor,
        work_info_set: torch.Tensor,
        work_indptr: torch.Tensor,
        reduce_indptr: torch.Tensor,
        reduce_final_map: torch.Tensor,
        reduce_partial_map: torch.Tensor,
        page_size: int = 1,
        kv_granularity: int = 16,
        max_seqlen_qo: int = -1,
        uni_seqlen_qo: int = -1,
        fast_mode: bool = True,
        topk: int = -1,
        max_split_per_batch: int = -1,
        intra_batch_mode: bool = False,
        is_cp_round_robin: bool = False,
        mla_version: int = 0,
        dtype_q_nope: torch.dtype | None = None,
        dtype_q_rope: torch.dtype | None = None,
        dtype_kv_nope: torch.dtype | None = None,
        dtype_kv_rope: torch.dtype | None = None,
        dtype_q: torch.dtype | None = None,
        dtype_kv: torch.dtype | None = None,
    ) -> None:
        """Plan with the reference planner (None dtypes mean bf16, as in AITER); write back."""
        arguments = {k: v for k, v in locals().items() if k != "self"}
        q_dtype = dtype_q_nope or dtype_q or torch.bfloat16
        kv_dtype = dtype_kv_nope or dtype_kv or torch.bfloat16
        plan = plan_persistent_decode(
            seqlens_qo_indptr,
            seqlens_kv_indptr,
            kv_last_page_lens,
            num_heads_q=num_heads_per_head_k * num_heads_k,
            max_seqlen_qo=max_seqlen_qo,
            uni_seqlen_qo=uni_seqlen_qo,
            page_size=page_size,
            kv_granularity=kv_granularity,
            causal=is_causal,
            max_split_per_batch=max_split_per_batch,
            q_dtype=q_dtype,
            kv_dtype=kv_dtype,
            arch=self.arch,
            num_cus=self.num_cus,
        )
        self.calls.append(PlannerCall(arguments, plan))
        _write(work_indptr, plan.work_indptr)
        _write(work_info_set, plan.work_info_set[: plan.num_works])
        _write(reduce_indptr, plan.reduce_indptr[: plan.num_tiles + 1])
        _write(reduce_final_map, plan.reduce_final_map)
        _write(reduce_partial_map, plan.reduce_partial_map[: plan.num_partials])

    def modules(self) -> dict[str, types.ModuleType]:
        """The ``aiter`` and ``aiter.dtypes`` modules backed by this stand-in."""
        dtypes = types.ModuleType("aiter.dtypes", "stand-in of aiter.dtypes (not AMD AITER)")
        dtypes.__dict__.update(
            __standin__=True,
            fp8=self.fp8,
            bf16=torch.bfloat16,
            fp16=torch.float16,
            fp32=torch.float32,
            i32=torch.int32,
            u64=torch.uint64,
        )
        aiter = types.ModuleType("aiter", "stand-in of aiter's MLA planner (not AMD AITER)")
        aiter.__dict__.update(
            __standin__=True,
            __version__="0.0.0+conformance-standin",
            dtypes=dtypes,
            get_mla_metadata_info_v1=self.get_mla_metadata_info_v1,
            get_mla_metadata_v1=self.get_mla_metadata_v1,
        )
        for module in (aiter, dtypes):  # importlib.util.find_spec answers for a stand-in too
            module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)
        return {"aiter": aiter, "aiter.dtypes": dtypes}


def _write(buffer: torch.Tensor, values: torch.Tensor) -> None:
    """Write `values` at the start of `buffer` (a prefix: AITER's buffers are upper bounds)."""
    flat = buffer.view(-1)
    data = values.reshape(-1).to(buffer.dtype)
    if data.numel() > flat.numel():
        raise ValueError(f"plan needs {data.numel()} entries, buffer holds {flat.numel()}")
    flat[: data.numel()] = data


def install_standin(standin: AiterStandin) -> dict[str, types.ModuleType | None]:
    """Put the stand-in's modules into ``sys.modules``; returns what they replaced."""
    previous = {name: sys.modules.get(name) for name in MODULES}
    sys.modules.update(standin.modules())
    return previous


def restore(previous: dict[str, types.ModuleType | None]) -> None:
    """Undo `install_standin`."""
    for name, module in previous.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
