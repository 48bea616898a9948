"""``flashinfer``: FlashInfer's MLA decode (`BatchMLAPagedAttentionWrapper`) with its own planner.

A plan-free backend (``plan_format = None``): the shared builder makes the paged-KV CSR
lists and attaches a `FlashInferSchedule` (what FlashInfer's ``plan()`` needs); the decode
plans a wrapper for it once per softmax scale and runs it. The wrapper's backend is
``fa3`` on Hopper (SM 9.x) and ``fa2`` elsewhere.

FlashInfer's fp8 path takes bf16 q over an e4m3fn cache with a per-tensor scale, applied
when the cache is dequantised into bf16 operands (``ckv_scale``/``kpe_scale``: one scale for
the whole 576-wide row here): the declaration says so, and fp8 q is not claimed. Its LSE is
base 2 (``log2``); the suite's convention is the natural log, so it is multiplied by ln 2.
Available on a CUDA machine where ``flashinfer`` imports (optional dependency
``flashinfer-python``).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from backends.base import (
    Availability,
    Backend,
    DecodeMetadata,
    DecodeScales,
    MetadataBuilder,
)
from backends.common import PlanFreeBuilder
from backends.triton_backend import cuda_device_count
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

HEAD_DIM_CKV = 512  # the latent part of a cache row
HEAD_DIM_KPE = 64  # the rope key part
WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's suggested float workspace
LN2 = math.log(2.0)


def flashinfer_module() -> Any:
    """The ``flashinfer`` package (imported on first use)."""
    return importlib.import_module("flashinfer")


def fa_backend(device: torch.device) -> str:
    """``fa3`` on Hopper (compute capability 9.x), ``fa2`` elsewhere."""
    major, _ = torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0)
    return "fa3" if major == 9 else "fa2"


@dataclass
class FlashInferSchedule:
    """What FlashInfer's planner takes for one batch, and the wrappers planned from it."""

    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_len_arr: torch.Tensor
    num_heads: int
    page_size: int
    causal: bool
    q_dtype: torch.dtype
    kv_dtype: torch.dtype
    planned: dict[float, Any] = field(default_factory=dict)
    """Planned wrappers by softmax scale."""

    def plan_kwargs(self, sm_scale: float) -> dict[str, Any]:
        """Keyword arguments of ``BatchMLAPagedAttentionWrapper.plan`` (canonical form)."""
        metadata = flashinfer_module().mla.MLAPlanMetadata.csr(
            qo_indptr=self.qo_indptr,
            kv_indptr=self.kv_indptr,
            kv_indices=self.kv_indices,
            kv_len_arr=self.kv_len_arr,
        )
        return {
            "metadata": metadata,
            "num_heads": self.num_heads,
            "head_dim_ckv": HEAD_DIM_CKV,
            "head_dim_kpe": HEAD_DIM_KPE,
            "page_size": self.page_size,
            "causal": self.causal,
            "sm_scale": sm_scale,
            "q_data_type": self.q_dtype,
            "kv_data_type": self.kv_dtype,
            "lse_mode": "base2",
        }


class FlashInferBuilder(PlanFreeBuilder):
    """The shared builder; attaches a `FlashInferSchedule` to the decode metadata."""

    def scheduler_metadata(self, decode: DecodeMetadata) -> FlashInferSchedule:
        return schedule_for(
            decode,
            num_heads=self.config.num_heads,
            q_dtype=self.config.q_dtype,
            kv_dtype=self.config.kv_cache.dtype,
        )


def schedule_for(
    decode: DecodeMetadata, *, num_heads: int, q_dtype: torch.dtype, kv_dtype: torch.dtype
) -> FlashInferSchedule:
    """The schedule of `decode`'s CSR lists (rows past the last kv list: padding, dropped)."""
    batch = len(decode.kv_indptr) - 1
    indptr = decode.kv_indptr.to(torch.int32)
    pages = (indptr[1:] - indptr[:-1]).to(torch.int64)
    last = decode.kv_last_page_lens.to(torch.int64)[:batch]
    kv_len = torch.where(pages > 0, (pages - 1) * decode.page_size + last, torch.zeros_like(pages))
    device = decode.kv_indptr.device
    return FlashInferSchedule(
        qo_indptr=decode.query_start_loc[: batch + 1].to(device, torch.int32),
        kv_indptr=indptr,
        kv_indices=decode.kv_indices.to(torch.int32),
        kv_len_arr=kv_len.to(torch.int32),
        num_heads=num_heads,
        page_size=decode.page_size,
        causal=decode.causal,
        q_dtype=q_dtype,
        kv_dtype=kv_dtype,
    )


class FlashInferBackend(Backend):
    """FlashInfer's batch MLA paged-attention decode on an NVIDIA GPU."""

    name: ClassVar[str] = "flashinfer"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL
    plan_format: ClassVar[str | None] = None
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16,)
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16, torch.float8_e4m3fn)
    numerics: ClassVar[str] = "dequant-bf16"

    def __init__(self) -> None:
        self._workspace: torch.Tensor | None = None

    def availability(self) -> Availability:
        if importlib.util.find_spec("flashinfer") is None:
            return Availability(False, "flashinfer is not installed (pip: flashinfer-python)")
        if torch.version.hip is not None or not torch.cuda.is_available():
            return Availability(False, f"no CUDA device: torch {torch.__version__}")
        try:
            flashinfer_module().mla.BatchMLAPagedAttentionWrapper  # noqa: B018
        except Exception as exc:  # a broken install is reported, not raised
            return Availability(False, f"flashinfer does not import: {type(exc).__name__}: {exc}")
        return Availability(True)

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device() if cuda_device_count() else 0)

    def builder_cls(self) -> type[MetadataBuilder]:
        return FlashInferBuilder

    def workspace(self) -> torch.Tensor:
        """The float workspace every wrapper shares (allocated once)."""
        if self._workspace is None:
            self._workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)
        return self._workspace

    def planned_wrapper(self, schedule: FlashInferSchedule, sm_scale: float) -> Any:
        """A wrapper planned for `schedule` at `sm_scale` (FlashInfer's own planner)."""
        wrapper = schedule.planned.get(sm_scale)
        if wrapper is None:
            mla = flashinfer_module().mla
            wrapper = mla.BatchMLAPagedAttentionWrapper(
                self.workspace(), backend=fa_backend(self.device)
            )
            wrapper.plan(**schedule.plan_kwargs(sm_scale))
            schedule.planned[sm_scale] = wrapper
        return wrapper

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q ``[T, H, 576]`` bf16, cache ``[pages, page, 576]`` bf16 or e4m3fn →
        out ``[T, H, 512]`` bf16 and natural-log LSE ``[T, H]`` fp32."""
        if q.dtype not in self.q_dtypes or kv_cache.dtype not in self.kv_dtypes:
            raise ValueError(
                f"flashinfer: q {q.dtype} / cache {kv_cache.dtype}: expected q in "
                f"{self.q_dtypes}, cache in {self.kv_dtypes}"
            )
        schedule = decode.scheduler
        if not isinstance(schedule, FlashInferSchedule):  # metadata fed without a schedule
            schedule = schedule_for(
                decode, num_heads=q.shape[1], q_dtype=q.dtype, kv_dtype=kv_cache.dtype
            )
            decode.scheduler = schedule
        fp8 = kv_cache.dtype == torch.float8_e4m3fn
        # A bf16 cache takes no kernel scale: its scale goes into the scores and the output.
        sm_scale = scales.sm_scale * scales.q_scale * (1.0 if fp8 else scales.kv_scale)
        wrapper = self.planned_wrapper(schedule, sm_scale)
        tokens = int(schedule.qo_indptr[-1])
        cache = kv_cache.reshape(kv_cache.shape[0], decode.page_size, -1)
        run: dict[str, Any] = {"query": q[:tokens].contiguous(), "kv_cache": cache}
        if fp8:
            run.update(ckv_scale=scales.kv_scale, kpe_scale=scales.kv_scale)
        out, lse2 = wrapper.run(**run, return_lse=True)
        if not fp8 and scales.kv_scale != 1.0:
            out = out * scales.kv_scale
        full_out = q.new_zeros((q.shape[0], q.shape[1], HEAD_DIM_CKV), dtype=torch.bfloat16)
        full_lse = torch.full(q.shape[:2], float("-inf"), device=q.device)
        full_out[:tokens] = out.to(torch.bfloat16)
        full_lse[:tokens] = lse2.float() * LN2  # base 2 -> natural log
        return full_out, full_lse
