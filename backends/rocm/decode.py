"""Decoding through AITER: one persistent ``aiter.mla.mla_decode_fwd`` call over a plan.

Converts the suite's layouts, scales and plan buffers to what ``mla_decode_fwd`` takes,
refuses a plan or gate that would not test the persistent path, and returns out and LSE in
the suite's layout (rows the kernel does not write stay NaN). Before the call, the shape is
looked up in the installed AITER's kernel table (`conformance.aiter_kernels.choose`): a shape
with no kernel, or an LSE asked for where no LSE variant exists, is refused with AITER's
reason (`AiterWouldAbort`), since AITER's own check would abort the process. The LSE is asked
for exactly where the table has an LSE variant; elsewhere the decode returns None for it.
"""

from __future__ import annotations

import math

import torch

from backends.base import DecodeMetadata, require_plan
from backends.rocm.api import KV_LORA_RANK, NUM_KV_HEADS, QK_HEAD_DIM
from backends.rocm.planner import AiterWorkPlan
from backends.rocm.probe import AiterRuntime, RocmDevice, persistent_gate_problem
from conformance.aiter_kernels import KernelChoice, KernelTable, choose
from conformance.applicability import dtype_label
from conformance.errors import BackendUnavailable, PlanError
from conformance.native_calls import native_call
from conformance.numerics.fp8 import is_fp8
from conformance.persistent.aiter_check import pointer_table_problems
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from kernels.paged import paged_cache_view


class AiterWouldAbort(RuntimeError):
    """A decode refused before the call: AITER has no kernel for it and would abort."""


def kernel_for(
    table: KernelTable, q: torch.Tensor, kv_cache: torch.Tensor, *, q_len: int, causal: bool
) -> KernelChoice:
    """The kernel AITER's persistent decode runs for these inputs (from `table`)."""
    return choose(
        table,
        q_dtype=dtype_label(q.dtype),
        kv_dtype=dtype_label(kv_cache.dtype),
        heads=int(q.shape[1]),
        q_len=q_len,
        causal=causal,
    )


def refuse_abort(choice: KernelChoice, *, return_lse: bool) -> None:
    """Raise `AiterWouldAbort` where AITER's kernel lookup would fail for this call."""
    if choice.kernel is None:
        raise AiterWouldAbort(f"refused before calling AITER: {choice.reason}")
    if return_lse and choice.lse_kernel is None:
        raise AiterWouldAbort(
            f"refused before calling AITER: return_lse=True, but {choice.lse_reason}; AITER "
            f"would abort"
        )


def _scale_tensor(value: float, device: torch.device) -> torch.Tensor:
    return torch.tensor([float(value)], dtype=torch.float32, device=device)


def _kernel_plan_buffers(
    plan: WorkPlan, device: RocmDevice
) -> tuple[dict[str, torch.Tensor], int | None]:
    """The six buffers the kernel reads (pointer table matching) and its ``num_kv_splits``.

    An `AiterWorkPlan` is used as AITER made it (its pointer table must still match) with
    ``num_kv_splits=None`` (AITER's own bound). Any other plan of the device's arch (e.g.
    the reference planner's, for another CU count) is copied to the device as int32 with a
    fresh pointer table; the kernel launches one program per ``work_indptr`` slot, and
    ``num_kv_splits`` is raised to that count so the reduce is sized for the plan's largest
    split group (AITER #3391).
    """
    if isinstance(plan, AiterWorkPlan) and plan.work_metadata_ptrs is not None:
        problems = pointer_table_problems(
            plan.work_metadata_ptrs, work_indptr=plan.work_indptr, work_info_set=plan.work_info_set
        )
        if problems:
            raise PlanError("decode.plan: " + "; ".join(problems))
        buffers = {name: getattr(plan, name) for name in PLAN_BUFFERS}
        buffers["work_metadata_ptrs"] = plan.work_metadata_ptrs
        return buffers, None
    arch = plan.params.get("arch")
    if arch is not None and arch != device.arch:
        raise PlanError(
            f"decode.plan: planned for {arch}, but the kernel runs on {device.arch} and folds "
            f"heads by its own arch's rules"
        )
    buffers = {
        name: getattr(plan, name).to(device=device.torch_device, dtype=torch.int32).contiguous()
        for name in PLAN_BUFFERS
    }
    pointers = [buffers["work_indptr"].data_ptr(), buffers["work_info_set"].data_ptr()]
    buffers["work_metadata_ptrs"] = torch.tensor(pointers, dtype=torch.uint64).to(
        device.torch_device
    )
    programs = buffers["work_indptr"].numel() - 1
    return buffers, max(device.num_cus, programs)


def _decode_scales(
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
    *,
    sm_scale: float,
    q_scale: float,
    kv_scale: float,
    device: torch.device,
) -> tuple[float, torch.Tensor | None, torch.Tensor | None]:
    """``(sm_scale, q_scale, kv_scale)`` as AITER takes them.

    fp8 q: both scales as fp32 ``[1]`` tensors (AITER requires both). bf16 q with fp8 kv:
    the kv scale as a tensor, the q scale folded into ``sm_scale``. bf16/bf16: no scale
    tensors (AITER applies none), the q scale folded into ``sm_scale``; a kv scale other
    than 1 has no meaning for a bf16 cache and is refused.
    """
    if is_fp8(q_dtype):
        if not is_fp8(kv_dtype):
            raise ValueError(f"q: fp8 q ({q_dtype}) with a {kv_dtype} cache is not supported")
        return sm_scale, _scale_tensor(q_scale, device), _scale_tensor(kv_scale, device)
    if is_fp8(kv_dtype):
        return sm_scale * q_scale, None, _scale_tensor(kv_scale, device)
    if kv_scale != 1.0:
        raise ValueError(
            f"kv_scale: {kv_scale} with a {kv_dtype} cache; AITER applies a kv scale only to "
            f"an fp8 cache"
        )
    return sm_scale * q_scale, None, None


def aiter_decode(
    runtime: AiterRuntime,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    decode: DecodeMetadata,
    *,
    sm_scale: float,
    q_scale: float,
    kv_scale: float,
    return_lse: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One persistent ``mla_decode_fwd`` call; see `RocmAiterBackend.decode`. `return_lse`
    None asks for the LSE wherever the kernel table has an LSE variant; True or False is
    passed as it is (and refused where AITER would abort)."""
    require_plan(decode)
    call = decode.planner_call
    if not call:
        raise ValueError("decode.planner_call: expected the planner's arguments, found none")
    for name, tensor in (("q_dtype", q), ("kv_dtype", kv_cache)):
        if tensor.dtype != call[name]:
            raise ValueError(
                f"{name}: the plan was made for {call[name]} but the decode gets {tensor.dtype}; "
                f"planning for another dtype than the kernel runs is vLLM #46997"
            )
    gate = persistent_gate_problem(runtime.api)
    if gate:
        raise BackendUnavailable(gate)
    device = runtime.device.torch_device
    cache = paged_cache_view(kv_cache)
    if q.dim() != 3 or q.shape[-1] != QK_HEAD_DIM or cache.shape[-1] != QK_HEAD_DIM:
        raise ValueError(
            f"q/kv_cache: expected [T, H, {QK_HEAD_DIM}] and [blocks, page, {QK_HEAD_DIM}], "
            f"found {tuple(q.shape)} and {tuple(kv_cache.shape)}"
        )
    qo_indptr = call["qo_indptr"].to(device=device, dtype=torch.int32).contiguous()
    rows = int(call["qo_indptr"][-1])
    tokens, heads = q.shape[0], q.shape[1]
    if rows > tokens:
        raise ValueError(f"q: the plan covers {rows} query rows, q has {tokens}")
    scale, q_scale_t, kv_scale_t = _decode_scales(
        q.dtype, cache.dtype, sm_scale=sm_scale, q_scale=q_scale, kv_scale=kv_scale, device=device
    )
    buffers, num_kv_splits = _kernel_plan_buffers(decode.plan, runtime.device)
    choice = kernel_for(
        runtime.kernels, q, cache, q_len=int(call["max_seqlen_qo"]), causal=decode.causal
    )
    wants_lse = choice.lse_kernel is not None if return_lse is None else return_lse
    refuse_abort(choice, return_lse=wants_lse)
    o = torch.full((rows, heads, KV_LORA_RANK), math.nan, dtype=torch.bfloat16, device=device)
    note = f"aiter.mla.mla_decode_fwd ({choice.key}, return_lse={wants_lse})"
    with native_call(note):
        _, final_lse = runtime.api.decode(
            q[:rows].to(device).contiguous(),
            cache.unsqueeze(2).to(device),  # kv_buffer [num_page, page_size, nhead_kv=1, 576]
            o,
            qo_indptr,
            decode.kv_indptr.to(device=device, dtype=torch.int32),
            decode.kv_indices.to(device=device, dtype=torch.int32),
            decode.kv_last_page_lens.to(device=device, dtype=torch.int32),
            int(call["max_seqlen_qo"]),
            page_size=decode.page_size,
            nhead_kv=NUM_KV_HEADS,
            sm_scale=scale,
            num_kv_splits=num_kv_splits,
            work_meta_data=buffers["work_metadata_ptrs"],
            work_indptr=buffers["work_indptr"],
            work_info_set=buffers["work_info_set"],
            reduce_indptr=buffers["reduce_indptr"],
            reduce_final_map=buffers["reduce_final_map"],
            reduce_partial_map=buffers["reduce_partial_map"],
            q_scale=q_scale_t,
            kv_scale=kv_scale_t,
            return_lse=wants_lse,
            causal=decode.causal,
        )
    out = torch.full((tokens, heads, KV_LORA_RANK), math.nan, dtype=torch.bfloat16, device=device)
    out[:rows] = o
    if not wants_lse:
        return out, None
    if final_lse is None:
        raise RuntimeError("aiter.mla.mla_decode_fwd(return_lse=True) returned no LSE")
    lse = torch.full((tokens, heads), math.nan, dtype=torch.float32, device=device)
    lse[:rows] = final_lse.reshape(rows, heads).to(torch.float32)  # natural log, as ours
    return out, lse
