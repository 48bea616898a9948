"""Planning through AITER: the builder's planner, AITER's buffers and its call arguments.

`AiterPlanner` answers the reference planner's call (`plan_persistent_decode`'s keyword
arguments) with ``aiter.get_mla_metadata_info_v1`` (sizes) and ``aiter.get_mla_metadata_v1``
(plan), checks the pointer table and reads the buffers back into an `AiterWorkPlan`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from backends.rocm.api import NUM_KV_HEADS
from backends.rocm.probe import AiterRuntime
from conformance.errors import PlanError
from conformance.native_calls import native_call
from conformance.numerics.fp8 import is_fp8
from conformance.persistent.aiter_check import aiter_plan_matches_reference, pointer_table_problems
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from conformance.persistent.planner import takes_planner_call
from conformance.persistent.sizing import METADATA_BUFFERS, UNWRITTEN

CHECK_PLAN_ENV = "MLA_ROCM_CHECK_PLAN"
"""Debug mode: with ``1``, every AITER plan is compared with the reference planner's."""


@dataclass
class AiterWorkPlan(WorkPlan):
    """A `WorkPlan` whose buffers AITER filled on the device, with its pointer table.

    ``aiter_calls`` keeps the raw arguments of the two AITER calls (for debugging and for
    the wiring tests). `WorkPlan.to` returns a plain `WorkPlan` (without the pointers).
    """

    work_metadata_ptrs: torch.Tensor | None = None
    aiter_calls: dict[str, dict[str, Any]] = field(default_factory=dict)


def _plan_counts(
    work_indptr: torch.Tensor,
    work_info_set: torch.Tensor,
    reduce_indptr: torch.Tensor,
    *,
    batch_size: int,
    num_heads_q: int,
) -> tuple[int, int, int, int]:
    """``(num_works, num_partials, num_tiles, fold_ratio)`` read back from AITER's buffers."""
    indptr = work_indptr.cpu()
    num_works = int(indptr[-1])
    if not 0 <= num_works <= work_info_set.shape[0] or int(indptr[0]) != 0:
        raise PlanError(
            f"work_indptr: AITER wrote [{int(indptr[0])}, ..., {num_works}], expected to start "
            f"at 0 and end within work_info_set's {work_info_set.shape[0]} rows"
        )
    works = work_info_set[:num_works].cpu()
    reduce = reduce_indptr.cpu()
    num_partials = int(reduce[-1])
    unsplit = int((works[:, 1] == -1).sum())
    num_tiles = unsplit + int((reduce[1:] > reduce[:-1]).sum())
    virtual = int(works[:, 0].max()) + 1 if num_works else batch_size
    if virtual % batch_size or num_heads_q % (virtual // batch_size):
        raise PlanError(
            f"work_info_set: AITER's works name {virtual} virtual batches for {batch_size} "
            f"batches of {num_heads_q} heads; expected a fold ratio dividing the head count"
        )
    return num_works, num_partials, num_tiles, virtual // batch_size


class AiterPlanner:
    """The builder's planner: the reference planner's call, answered by AITER's planner.

    Called with `plan_persistent_decode`'s keyword arguments; allocates the six buffers
    with ``get_mla_metadata_info_v1``'s sizes (int32 ones filled with `UNWRITTEN`), fills
    them with ``get_mla_metadata_v1`` and returns an `AiterWorkPlan`. ``arch`` and
    ``num_cus`` must be the device's: AITER plans for the device it runs on.
    """

    def __init__(self, runtime: AiterRuntime) -> None:
        self.runtime = runtime

    @takes_planner_call
    def __call__(
        self,
        qo_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        kv_last_page_lens: torch.Tensor,
        **keywords: Any,
    ) -> AiterWorkPlan:
        """Plan one decode batch with AITER (arguments as `plan_persistent_decode`'s)."""
        num_heads_q, max_seqlen_qo = keywords["num_heads_q"], keywords["max_seqlen_qo"]
        arch, num_cus = keywords["arch"], keywords["num_cus"]
        q_dtype, kv_dtype = keywords["q_dtype"], keywords["kv_dtype"]
        max_split_per_batch, causal = keywords["max_split_per_batch"], keywords["causal"]
        device = self.runtime.device
        if arch != device.arch:
            raise PlanError(
                f"arch: AITER plans for the device it runs on ({device.arch}), asked for {arch!r}"
            )
        if num_cus != device.num_cus:
            raise PlanError(
                f"num_cus: AITER plans for the device's {device.num_cus} CUs "
                f"(multiProcessorCount), asked for {num_cus}"
            )
        self._check_dtypes(q_dtype, kv_dtype)
        batch_size = kv_indptr.numel() - 1
        info_args = (batch_size, max_seqlen_qo, num_heads_q, q_dtype, kv_dtype)
        info_kwargs = metadata_info_kwargs(max_split_per_batch=max_split_per_batch)
        specs = self.runtime.api.metadata_info(*info_args, **info_kwargs)
        buffers = allocate_aiter_buffers(specs, device=device.torch_device)
        inputs = tuple(
            t.to(device=device.torch_device, dtype=torch.int32).contiguous()
            for t in (qo_indptr, kv_indptr, kv_last_page_lens)
        )
        args = metadata_args(inputs, buffers, num_heads_q=num_heads_q, causal=bool(causal))
        kwargs = metadata_kwargs(
            page_size=keywords["page_size"],
            kv_granularity=keywords["kv_granularity"],
            max_seqlen_qo=max_seqlen_qo,
            uni_seqlen_qo=keywords["uni_seqlen_qo"],
            max_split_per_batch=max_split_per_batch,
            dtype_keywords=self.runtime.api.dtype_keywords,
            q_dtype=q_dtype,
            kv_dtype=kv_dtype,
        )
        with native_call(f"aiter.get_mla_metadata_v1 ({num_heads_q} heads)"):
            self.runtime.api.metadata(*args, **kwargs)

        problems = pointer_table_problems(
            buffers["work_metadata_ptrs"],
            work_indptr=buffers["work_indptr"],
            work_info_set=buffers["work_info_set"],
        )
        if problems:
            raise PlanError("aiter.get_mla_metadata_v1: " + "; ".join(problems))
        call = {
            "qo_indptr": qo_indptr,
            "kv_indptr": kv_indptr,
            "kv_last_page_lens": kv_last_page_lens,
            **keywords,
        }
        aiter_calls = {
            "get_mla_metadata_info_v1": {
                "args": info_args,
                "kwargs": info_kwargs,
                "returned": specs,
            },
            "get_mla_metadata_v1": {"args": args, "kwargs": kwargs},
        }
        plan = self._assemble(buffers, call, aiter_calls)
        if os.environ.get(CHECK_PLAN_ENV) == "1":
            differences = aiter_plan_matches_reference(plan, call)
            if differences:
                raise PlanError(
                    f"{CHECK_PLAN_ENV}=1: AITER's plan differs from the reference planner's: "
                    + "; ".join(differences)
                )
        return plan

    def _assemble(
        self,
        buffers: dict[str, torch.Tensor],
        call: dict[str, Any],
        aiter_calls: dict[str, dict[str, Any]],
    ) -> AiterWorkPlan:
        """The `AiterWorkPlan` over AITER's filled buffers, its counts read back from them."""
        heads, device = call["num_heads_q"], self.runtime.device
        num_works, num_partials, num_tiles, ratio = _plan_counts(
            buffers["work_indptr"],
            buffers["work_info_set"],
            buffers["reduce_indptr"],
            batch_size=call["kv_indptr"].numel() - 1,
            num_heads_q=heads,
        )
        params: dict[str, object] = {
            **{k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in call.items()},
            "q_dtype": str(call["q_dtype"]),
            "kv_dtype": str(call["kv_dtype"]),
            "fold_ratio": ratio,
            "heads_per_work": heads // ratio,
            "num_tiles": num_tiles,
            "planner": f"aiter.get_mla_metadata_v1 (aiter {self.runtime.api.version}) on "
            f"{device.name} {device.arch}, {device.num_cus} CUs",
        }
        return AiterWorkPlan(
            **{name: buffers[name] for name in PLAN_BUFFERS},
            num_works=num_works,
            num_partials=num_partials,
            num_tiles=num_tiles,
            fold_ratio=ratio,
            heads_per_work=heads // ratio,
            max_seqlen_qo=call["max_seqlen_qo"],
            params=params,
            work_metadata_ptrs=buffers["work_metadata_ptrs"],
            aiter_calls=aiter_calls,
        )

    def _check_dtypes(self, q_dtype: object, kv_dtype: object) -> None:
        fp8 = self.runtime.api.fp8
        for argument, dtype in (("q_dtype", q_dtype), ("kv_dtype", kv_dtype)):
            if dtype is None:
                raise PlanError(
                    f"{argument}: expected an explicit dtype, found None; AITER reads a "
                    f"missing dtype as bfloat16 (vLLM #46997)"
                )
            if dtype == torch.bfloat16 or dtype == fp8:
                continue
            if isinstance(dtype, torch.dtype) and is_fp8(dtype):
                raise PlanError(
                    f"{argument}: {dtype} is not AITER's fp8 on {self.runtime.device.arch} "
                    f"(aiter.dtypes.fp8 = {fp8}); AITER would size it as non-fp8 and reject it "
                    f"when planning"
                )
            raise PlanError(
                f"{argument}: AITER's persistent MLA decode takes bfloat16 or {fp8}, found {dtype}"
            )
        if q_dtype == fp8 and kv_dtype != fp8:
            raise PlanError(
                f"q_dtype: fp8 q with {kv_dtype} kv is not a persistent MLA combination AITER has"
            )


def metadata_info_kwargs(*, max_split_per_batch: int) -> dict[str, Any]:
    """Keyword arguments of ``get_mla_metadata_info_v1`` (fast-mode v1.2 sizing)."""
    return {
        "is_sparse": False,
        "fast_mode": True,
        "intra_batch_mode": False,
        "max_split_per_batch": max_split_per_batch,
    }


def allocate_aiter_buffers(
    specs: Sequence[tuple[Any, torch.dtype]], *, device: torch.device
) -> dict[str, torch.Tensor]:
    """The six buffers of ``get_mla_metadata_info_v1``'s `specs`, by `METADATA_BUFFERS` name.

    ``work_metadata_ptrs`` is zeroed (an unwritten pointer reads 0), int32 buffers are
    filled with `UNWRITTEN` so that whatever AITER does not write is deterministic.
    """
    if len(specs) != len(METADATA_BUFFERS):
        raise PlanError(
            f"aiter.get_mla_metadata_info_v1: expected {len(METADATA_BUFFERS)} (shape, dtype) "
            f"pairs, found {len(specs)}"
        )
    buffers: dict[str, torch.Tensor] = {}
    for index, (name, (shape, dtype)) in enumerate(zip(METADATA_BUFFERS, specs, strict=True)):
        expected = torch.uint64 if index == 0 else torch.int32
        if dtype != expected:
            raise PlanError(
                f"aiter.get_mla_metadata_info_v1: {name} has dtype {dtype}, expected {expected}"
            )
        size = (shape,) if isinstance(shape, int) else tuple(shape)
        if index == 0:  # made on the host: few torch builds fill uint64 on a GPU
            buffers[name] = torch.zeros(size, dtype=dtype).to(device)
        else:
            buffers[name] = torch.full(size, UNWRITTEN, dtype=dtype, device=device)
    return buffers


def metadata_args(
    inputs: Sequence[torch.Tensor],
    buffers: Mapping[str, torch.Tensor],
    *,
    num_heads_q: int,
    causal: bool,
) -> tuple[Any, ...]:
    """The 12 positional arguments of ``get_mla_metadata_v1``, in its order.

    Its buffer order is ``work_metadata_ptrs, work_info_set, work_indptr, ...``: not the
    order of ``get_mla_metadata_info_v1``'s tuple (`METADATA_BUFFERS`).
    """
    qo_indptr, kv_indptr, kv_last_page_lens = inputs
    return (
        qo_indptr,
        kv_indptr,
        kv_last_page_lens,
        num_heads_q // NUM_KV_HEADS,
        NUM_KV_HEADS,
        causal,
        buffers["work_metadata_ptrs"],
        buffers["work_info_set"],
        buffers["work_indptr"],
        buffers["reduce_indptr"],
        buffers["reduce_final_map"],
        buffers["reduce_partial_map"],
    )


def dtype_kwargs(
    dtype_keywords: Sequence[str], *, q_dtype: torch.dtype, kv_dtype: torch.dtype
) -> dict[str, torch.dtype]:
    """Every dtype keyword of ``get_mla_metadata_v1``, explicitly (None would mean bf16)."""
    return {name: (q_dtype if name.startswith("dtype_q") else kv_dtype) for name in dtype_keywords}


def metadata_kwargs(
    *,
    page_size: int,
    kv_granularity: int,
    max_seqlen_qo: int,
    uni_seqlen_qo: int,
    max_split_per_batch: int,
    dtype_keywords: Sequence[str],
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
) -> dict[str, Any]:
    """Keyword arguments of ``get_mla_metadata_v1``: max/uni seqlen and dtypes always given."""
    return {
        "page_size": page_size,
        "kv_granularity": kv_granularity,
        "max_seqlen_qo": max_seqlen_qo,
        "uni_seqlen_qo": uni_seqlen_qo,
        "fast_mode": True,
        "max_split_per_batch": max_split_per_batch,
        "intra_batch_mode": False,
        **dtype_kwargs(dtype_keywords, q_dtype=q_dtype, kv_dtype=kv_dtype),
    }
