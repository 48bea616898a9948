"""The ROCm backend: AMD AITER's persistent MLA decode behind the suite's `Backend` interface.

Planning and decoding go through AITER's public Python API (research note
aiter_persistent_mla.md §1-§3; ``aiter/ops/attention.py`` and ``aiter/mla.py``):

- sizes: ``aiter.get_mla_metadata_info_v1(B, max_seqlen_qo, H, q_dtype, kv_dtype,
  is_sparse=False, fast_mode=True, intra_batch_mode=False, max_split_per_batch=...)``;
- plan: ``aiter.get_mla_metadata_v1(qo_indptr, kv_indptr, kv_last_page_lens, H, 1, causal,
  work_metadata_ptrs, work_info_set, work_indptr, reduce_indptr, reduce_final_map,
  reduce_partial_map, page_size=..., kv_granularity=..., max_seqlen_qo=...,
  uni_seqlen_qo=..., fast_mode=True, max_split_per_batch=..., intra_batch_mode=False,
  dtype_q_nope=q, dtype_q_rope=q, dtype_kv_nope=kv, dtype_kv_rope=kv)`` — every dtype
  explicit, because AITER reads a missing one as bf16 (vLLM #46997), and the buffers in
  this call's order, which is *not* the info tuple's (``work_info_set`` first);
- decode: ``aiter.mla.mla_decode_fwd(q, kv_buffer[pages, page, 1, 576], o, qo_indptr,
  kv_indptr, kv_indices, kv_last_page_lens, max_seqlen_qo, page_size=..., nhead_kv=1,
  sm_scale=..., num_kv_splits=None, work_meta_data=..., <the five plan buffers>,
  q_scale=..., kv_scale=..., return_lse=True, causal=...)`` in persistent mode, with
  ``AITER_MLA_DECODE_PERSISTENT_MAX_BATCH=0`` pinned so that AITER never falls back to its
  non-persistent kernel (AITER #4144); ``o`` is prefilled with NaN.

The builder is the shared `MLACommonBuilder`; its ``planner`` is an `AiterPlanner`, a
callable taking the reference planner's keyword arguments, so the suite's planner spy sees
the same call for every backend. Availability needs a ROCm torch, a gfx942/gfx950 device,
an importable ``aiter`` whose API has the arguments above, and agreement between the
device and AITER on arch, CU count and fp8 flavour. ``aiter`` is imported only when the
backend is probed, never when this module is imported. A module marked ``__standin__``
(the selftests' test double) is refused unless `ALLOW_STANDIN` is set by a selftest.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import ModuleType
from typing import Any, ClassVar

import torch

from backends.base import Availability, Backend, BuilderConfig, DecodeMetadata, MetadataBuilder
from backends.common import MLACommonBuilder
from conformance.errors import BackendUnavailable, PlanError
from conformance.layers import MLA_BUILDER_LAYER_PROTOCOL
from conformance.persistent.aiter_check import aiter_plan_matches_reference, pointer_table_problems
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from conformance.persistent.sizing import METADATA_BUFFERS, UNWRITTEN
from kernels.fp8 import fp8_dtype_for_arch, is_fp8
from kernels.paged import paged_cache_view

SUPPORTED_ARCHS: tuple[str, ...] = ("gfx942", "gfx950")
"""Archs with AITER persistent MLA decode kernels: MI300 (CDNA3) and MI350 (CDNA4)."""

PERSISTENT_GATE_ENV = "AITER_MLA_DECODE_PERSISTENT_MAX_BATCH"
"""AITER's batch-size gate on the persistent path; the adapter pins it to 0 (off)."""

CHECK_PLAN_ENV = "MLA_ROCM_CHECK_PLAN"
"""Debug mode: with ``1``, every AITER plan is compared with the reference planner's."""

ALLOW_STANDIN = False
"""Set to True only by the selftests that install the ``aiter`` stand-in (monkeypatch)."""

NUM_KV_HEADS = 1
QK_HEAD_DIM = 576
KV_LORA_RANK = 512

METADATA_POSITIONAL: tuple[str, ...] = (
    "seqlens_qo_indptr",
    "seqlens_kv_indptr",
    "kv_last_page_lens",
    "num_heads_per_head_k",
    "num_heads_k",
    "is_causal",
    "work_metadata_ptrs",
    "work_info_set",
    "work_indptr",
    "reduce_indptr",
    "reduce_final_map",
    "reduce_partial_map",
)
"""``get_mla_metadata_v1``'s leading parameters, in order (note work_info_set first)."""
METADATA_KEYWORDS: tuple[str, ...] = (
    "page_size",
    "kv_granularity",
    "max_seqlen_qo",
    "uni_seqlen_qo",
    "fast_mode",
    "max_split_per_batch",
    "intra_batch_mode",
)
COMPONENT_DTYPE_KEYWORDS: tuple[str, ...] = (
    "dtype_q_nope",
    "dtype_q_rope",
    "dtype_kv_nope",
    "dtype_kv_rope",
)
LEGACY_DTYPE_KEYWORDS: tuple[str, ...] = ("dtype_q", "dtype_kv")
INFO_POSITIONAL: tuple[str, ...] = (
    "batch_size",
    "max_seqlen_qo",
    "num_head_qo",
    "q_dtype",
    "kv_dtype",
    "is_sparse",
)
INFO_KEYWORDS: tuple[str, ...] = ("fast_mode", "intra_batch_mode", "max_split_per_batch")
DECODE_POSITIONAL: tuple[str, ...] = (
    "q",
    "kv_buffer",
    "o",
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "kv_last_page_lens",
    "max_seqlen_q",
)
DECODE_KEYWORDS: tuple[str, ...] = (
    "page_size",
    "nhead_kv",
    "sm_scale",
    "num_kv_splits",
    "work_meta_data",
    "work_indptr",
    "work_info_set",
    "reduce_indptr",
    "reduce_final_map",
    "reduce_partial_map",
    "q_scale",
    "kv_scale",
    "return_lse",
    "causal",
)


# ---------------------------------------------------------------------------------------
# Probes (the selftests replace these three functions to fake a ROCm machine)


@dataclass(frozen=True)
class RocmDevice:
    """The GPU the backend runs on, as torch reports it."""

    torch_device: torch.device
    arch: str
    """``gcnArchName`` without its feature flags, e.g. ``gfx942``."""
    num_cus: int
    """``multi_processor_count``: the CU count AITER's planner reads (hipDeviceProp)."""
    name: str


def torch_hip_version() -> str | None:
    """HIP version of this torch build (``torch.version.hip``); None for CUDA/CPU builds."""
    return getattr(torch.version, "hip", None)


def probe_device() -> RocmDevice | str:
    """The current ROCm device, or the reason there is none."""
    if not torch.cuda.is_available():
        return f"no ROCm device: torch {torch.__version__} (HIP {torch_hip_version()}) sees no GPU"
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    arch = str(getattr(props, "gcnArchName", "") or "unknown").split(":")[0]
    return RocmDevice(
        torch_device=torch.device("cuda", index),
        arch=arch,
        num_cus=int(props.multi_processor_count),
        name=str(props.name),
    )


def import_aiter() -> tuple[ModuleType, ModuleType, ModuleType]:
    """``(aiter, aiter.mla, aiter.jit.utils.chip_info)``; raises whatever the import raises."""
    aiter = importlib.import_module("aiter")
    mla = importlib.import_module("aiter.mla")
    chip_info = importlib.import_module("aiter.jit.utils.chip_info")
    return aiter, mla, chip_info


# ---------------------------------------------------------------------------------------
# The AITER API, resolved and checked once


@dataclass(frozen=True)
class AiterApi:
    """The AITER callables and facts the adapter uses, checked against the expected API."""

    metadata_info: Callable[..., Any]
    """``aiter.get_mla_metadata_info_v1``"""
    metadata: Callable[..., Any]
    """``aiter.get_mla_metadata_v1``"""
    decode: Callable[..., Any]
    """``aiter.mla.mla_decode_fwd``"""
    fp8: torch.dtype
    """``aiter.dtypes.fp8``"""
    arch: str
    """``aiter.jit.utils.chip_info.get_gfx()``"""
    num_cus: int
    """``aiter.jit.utils.chip_info.get_cu_num()`` (``CU_NUM`` or rocminfo): buffer sizing."""
    dtype_keywords: tuple[str, ...]
    """The dtype keywords ``get_mla_metadata_v1`` takes (per-component, else legacy)."""
    version: str
    is_standin: bool
    gate: Callable[[], int] | None = None
    """``aiter.mla._persistent_mla_decode_max_batch`` (the gate value AITER caches), if any."""


@dataclass(frozen=True)
class AiterRuntime:
    """A usable ROCm device with a checked AITER."""

    device: RocmDevice
    api: AiterApi


def _parameters(function: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return None


def _signature_problem(
    function: Callable[..., Any],
    qualname: str,
    *,
    positional: Sequence[str],
    keywords: Sequence[str],
) -> str | None:
    """Why `function` does not take `positional` (in order) and `keywords`, or None."""
    params = _parameters(function)
    if params is None:
        return None
    names = [p.name for p in params]
    if names[: len(positional)] != list(positional):
        return (
            f"{qualname} takes {tuple(names[: len(positional)])} first, expected "
            f"{tuple(positional)}: this aiter's API differs from the one the adapter targets"
        )
    missing = [k for k in keywords if k not in names]
    if missing:
        return f"{qualname} has no parameter {', '.join(missing)}"
    return None


def _dtype_keywords(function: Callable[..., Any]) -> tuple[str, ...] | str:
    """The dtype keywords of ``get_mla_metadata_v1``, or why it has none."""
    params = _parameters(function)
    if params is None:
        return COMPONENT_DTYPE_KEYWORDS
    names = {p.name for p in params}
    if set(COMPONENT_DTYPE_KEYWORDS) <= names:
        return COMPONENT_DTYPE_KEYWORDS
    if set(LEGACY_DTYPE_KEYWORDS) <= names:
        return LEGACY_DTYPE_KEYWORDS
    return (
        "aiter.get_mla_metadata_v1 takes no dtype arguments (dtype_q_nope/dtype_kv_nope or "
        "dtype_q/dtype_kv): it would plan every run for bf16 (vLLM #46997)"
    )


def _pin_persistent_gate() -> str | None:
    """Pin AITER's persistent batch gate off (unless set); why it is not off, or None."""
    value = os.environ.setdefault(PERSISTENT_GATE_ENV, "0")
    try:
        limit = int(value)
    except ValueError:
        limit = 32  # what AITER falls back to for a value it cannot parse
    if limit > 0:
        return (
            f"{PERSISTENT_GATE_ENV}={value}: aiter.mla.mla_decode_fwd falls back to its "
            f"non-persistent kernel for gfx950 bf16 16-head decode at batch >= {limit}, so "
            f"the persistent path would not be tested; set it to 0 (nox -s rocm does)"
        )
    return None


def _gate_reader(mla: ModuleType) -> Callable[[], int] | None:
    """AITER's cached read of the gate variable, where this aiter has one."""
    reader = getattr(mla, "_persistent_mla_decode_max_batch", None)
    return reader if callable(reader) else None


def _gate_read_by_aiter(reader: Callable[[], int] | None) -> str | None:
    """Why the gate value AITER uses (it reads the variable once) is not 0, or None."""
    if reader is None:
        return None
    limit = int(reader())
    if limit > 0:
        return (
            f"aiter.mla read {PERSISTENT_GATE_ENV}={limit} before the adapter pinned it to 0 "
            f"(aiter was imported earlier in this process): the persistent path can be bypassed"
        )
    return None


def _resolve_api(
    aiter: ModuleType, mla: ModuleType, chip_info: ModuleType, device: RocmDevice
) -> AiterApi | str:
    """The checked API, or the first reason it cannot be used with `device`."""
    is_standin = bool(getattr(aiter, "__standin__", False))
    if is_standin and not ALLOW_STANDIN:
        return (
            "aiter is the selftests' stand-in (module marked __standin__), not AMD AITER: "
            "its results are never a rocm conformance run"
        )
    missing = [
        name
        for name, module in (
            ("aiter.get_mla_metadata_info_v1", aiter),
            ("aiter.get_mla_metadata_v1", aiter),
            ("aiter.mla.mla_decode_fwd", mla),
            ("aiter.dtypes", aiter),
            ("aiter.jit.utils.chip_info.get_gfx", chip_info),
            ("aiter.jit.utils.chip_info.get_cu_num", chip_info),
        )
        if not hasattr(module, name.rsplit(".", 1)[1])
    ]
    if missing:
        return f"this aiter lacks {', '.join(missing)}"
    problem = (
        _signature_problem(
            aiter.get_mla_metadata_info_v1,
            "aiter.get_mla_metadata_info_v1",
            positional=INFO_POSITIONAL,
            keywords=INFO_KEYWORDS,
        )
        or _signature_problem(
            aiter.get_mla_metadata_v1,
            "aiter.get_mla_metadata_v1",
            positional=METADATA_POSITIONAL,
            keywords=METADATA_KEYWORDS,
        )
        or _signature_problem(
            mla.mla_decode_fwd,
            "aiter.mla.mla_decode_fwd",
            positional=DECODE_POSITIONAL,
            keywords=DECODE_KEYWORDS,
        )
    )
    if problem:
        return problem
    dtype_keywords = _dtype_keywords(aiter.get_mla_metadata_v1)
    if isinstance(dtype_keywords, str):
        return dtype_keywords
    arch = str(chip_info.get_gfx())
    if arch != device.arch:
        return (
            f"aiter's get_gfx() says {arch} but the device is {device.arch} ({device.name}); "
            f"check GPU_ARCHS"
        )
    num_cus = int(chip_info.get_cu_num())
    if num_cus != device.num_cus:
        return (
            f"aiter's get_cu_num() says {num_cus} CUs (CU_NUM={os.environ.get('CU_NUM')!r}) but "
            f"the device has {device.num_cus}: AITER would size work_indptr for {num_cus} CUs "
            f"and plan for {device.num_cus}; unset CU_NUM"
        )
    fp8 = aiter.dtypes.fp8
    if fp8 != fp8_dtype_for_arch(arch):
        return (
            f"aiter.dtypes.fp8 is {fp8} on {arch}, expected {fp8_dtype_for_arch(arch)}: "
            f"the suite's fp8 inputs would not be AITER's"
        )
    gate = _gate_reader(mla)
    problem = _gate_read_by_aiter(gate)
    if problem:
        return problem
    return AiterApi(
        metadata_info=aiter.get_mla_metadata_info_v1,
        metadata=aiter.get_mla_metadata_v1,
        decode=mla.mla_decode_fwd,
        fp8=fp8,
        arch=arch,
        num_cus=num_cus,
        dtype_keywords=dtype_keywords,
        version=str(getattr(aiter, "__version__", "unknown")),
        is_standin=is_standin,
        gate=gate,
    )


def probe_runtime() -> AiterRuntime | Availability:
    """Everything the backend needs, or `Availability(False, reason)` naming what is missing."""
    hip = torch_hip_version()
    if not hip:
        return Availability(False, f"no ROCm device: torch {torch.__version__} has no HIP support")
    device = probe_device()
    if isinstance(device, str):
        return Availability(False, device)
    if device.arch not in SUPPORTED_ARCHS:
        return Availability(
            False,
            f"unsupported arch {device.arch} ({device.name}): AITER's persistent MLA decode "
            f"runs on {' and '.join(SUPPORTED_ARCHS)}",
        )
    gate = _pin_persistent_gate()
    if gate:
        return Availability(False, gate)
    try:
        modules = import_aiter()
    except Exception as exc:  # any import failure is the reason, never a crash
        return Availability(False, f"aiter is not importable: {type(exc).__name__}: {exc}")
    api = _resolve_api(*modules, device)
    if isinstance(api, str):
        return Availability(False, api)
    return AiterRuntime(device=device, api=api)


# ---------------------------------------------------------------------------------------
# Planning through AITER


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

    def __call__(
        self,
        qo_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        kv_last_page_lens: torch.Tensor,
        *,
        num_heads_q: int,
        max_seqlen_qo: int,
        uni_seqlen_qo: int,
        page_size: int,
        kv_granularity: int,
        causal: bool,
        max_split_per_batch: int,
        q_dtype: torch.dtype,
        kv_dtype: torch.dtype,
        arch: str,
        num_cus: int,
    ) -> AiterWorkPlan:
        """Plan one decode batch with AITER (arguments as `plan_persistent_decode`'s)."""
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
            page_size=page_size,
            kv_granularity=kv_granularity,
            max_seqlen_qo=max_seqlen_qo,
            uni_seqlen_qo=uni_seqlen_qo,
            max_split_per_batch=max_split_per_batch,
            dtype_keywords=self.runtime.api.dtype_keywords,
            q_dtype=q_dtype,
            kv_dtype=kv_dtype,
        )
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
            "num_heads_q": num_heads_q,
            "max_seqlen_qo": max_seqlen_qo,
            "uni_seqlen_qo": uni_seqlen_qo,
            "page_size": page_size,
            "kv_granularity": kv_granularity,
            "causal": causal,
            "max_split_per_batch": max_split_per_batch,
            "q_dtype": q_dtype,
            "kv_dtype": kv_dtype,
            "arch": arch,
            "num_cus": num_cus,
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


class RocmAiterBuilder(MLACommonBuilder):
    """The shared builder, planning with AITER; `RocmAiterBackend` binds it to a device."""

    runtime: ClassVar[AiterRuntime | None] = None

    def __init__(
        self,
        config: BuilderConfig,
        layer_names: list[str],
        static_forward_context: Mapping[str, Any],
    ) -> None:
        if self.runtime is None:
            raise BackendUnavailable(
                "RocmAiterBuilder is not bound to a device: use RocmAiterBackend().builder_cls()"
            )
        super().__init__(config, layer_names, static_forward_context)
        self.planner = AiterPlanner(self.runtime)


# ---------------------------------------------------------------------------------------
# Decode through AITER


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


def _persistent_gate_problem(api: AiterApi) -> str | None:
    """Why AITER could bypass the persistent path now, or None (checked before each decode).

    AITER reads the gate variable once and caches it; where its reader exists, the cached
    value is what counts, else the environment.
    """
    if api.gate is not None:
        return _gate_read_by_aiter(api.gate)
    return _pin_persistent_gate()


def aiter_decode(
    runtime: AiterRuntime,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    decode: DecodeMetadata,
    *,
    sm_scale: float,
    q_scale: float,
    kv_scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One persistent ``mla_decode_fwd`` call; see `RocmAiterBackend.decode`."""
    if decode.plan is None:
        raise ValueError("decode.plan: expected a work plan, found None (no decode rows?)")
    call = decode.planner_call
    if not call:
        raise ValueError("decode.planner_call: expected the planner's arguments, found none")
    for name, tensor in (("q_dtype", q), ("kv_dtype", kv_cache)):
        if tensor.dtype != call[name]:
            raise ValueError(
                f"{name}: the plan was made for {call[name]} but the decode gets {tensor.dtype}; "
                f"planning for another dtype than the kernel runs is vLLM #46997"
            )
    gate = _persistent_gate_problem(runtime.api)
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
    o = torch.full((rows, heads, KV_LORA_RANK), math.nan, dtype=torch.bfloat16, device=device)
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
        return_lse=True,
        causal=decode.causal,
    )
    if final_lse is None:
        raise RuntimeError("aiter.mla.mla_decode_fwd(return_lse=True) returned no LSE")
    out = torch.full((tokens, heads, KV_LORA_RANK), math.nan, dtype=torch.bfloat16, device=device)
    lse = torch.full((tokens, heads), math.nan, dtype=torch.float32, device=device)
    out[:rows] = o
    lse[:rows] = final_lse.reshape(rows, heads).to(torch.float32)  # natural log, as ours
    return out, lse


# ---------------------------------------------------------------------------------------
# The backend


class RocmAiterBackend(Backend):
    """AMD AITER's persistent MLA decode (asm kernels) on an MI300 or MI350 GPU."""

    name: ClassVar[str] = "rocm"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL
    numerics: ClassVar[str] = "tensor-core"

    @cached_property
    def _probed(self) -> AiterRuntime | Availability:
        return probe_runtime()

    def availability(self) -> Availability:
        probed = self._probed
        return probed if isinstance(probed, Availability) else Availability(True)

    def runtime(self) -> AiterRuntime:
        """The device and AITER API; raises `BackendUnavailable` with the reason."""
        probed = self._probed
        if isinstance(probed, Availability):
            raise BackendUnavailable(f"backend rocm unavailable: {probed.reason}")
        return probed

    @property
    def device(self) -> torch.device:
        """The ROCm device (``cuda:N`` in torch); ``cuda`` when there is none."""
        probed = self._probed
        return (
            probed.device.torch_device if isinstance(probed, AiterRuntime) else torch.device("cuda")
        )

    @cached_property
    def _bound_builder(self) -> type[RocmAiterBuilder]:
        runtime = self.runtime()
        attributes = {
            "runtime": runtime,
            "default_arch": runtime.device.arch,
            "default_num_cus": runtime.device.num_cus,
            "__doc__": RocmAiterBuilder.__doc__,
        }
        return type(f"RocmAiterBuilder_{runtime.device.arch}", (RocmAiterBuilder,), attributes)

    def builder_cls(self) -> type[MetadataBuilder]:
        return self._bound_builder

    def plan_archs(self) -> tuple[str, ...]:
        """The device's arch only (AITER plans for it); both supported archs when there is none."""
        probed = self._probed
        return (probed.device.arch,) if isinstance(probed, AiterRuntime) else SUPPORTED_ARCHS

    def default_num_cus(self) -> int:
        probed = self._probed
        if isinstance(probed, AiterRuntime):
            return probed.device.num_cus
        return super().default_num_cus()

    def plan_cu_counts(self) -> tuple[int, ...] | None:
        """CU counts its builder can plan for: the device's only (None: no device)."""
        probed = self._probed
        return (probed.device.num_cus,) if isinstance(probed, AiterRuntime) else None

    def decode_archs(self) -> tuple[str, ...]:
        """Profiles whose plans its decode can execute: the device's arch (AITER's kernel
        lays heads out by its own arch's rules), for any CU count."""
        return self.plan_archs()

    def native_plan_check(self, decode: DecodeMetadata) -> list[str] | None:
        """Differences between AITER's plan in `decode` and the reference planner's.

        ``[]`` when AITER's buffers equal the reference on every written region and its
        pointer table matches; None when `decode` carries no AITER plan.
        """
        plan = decode.plan
        if not isinstance(plan, AiterWorkPlan):
            return None
        return aiter_plan_matches_reference(
            plan, decode.planner_call, work_metadata_ptrs=plan.work_metadata_ptrs
        )

    def decode(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        decode: DecodeMetadata,
        *,
        sm_scale: float,
        q_scale: float = 1.0,
        kv_scale: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Persistent ``aiter.mla.mla_decode_fwd`` over `decode.plan`.

        q ``[T, H, 576]`` and the cache ``[blocks, page, 576]`` in the planned dtypes
        (bf16, or AITER's fp8); returns out ``[T, H, 512]`` bf16 and the natural-log LSE
        ``[T, H]`` fp32, on the device. The output is prefilled with NaN, so rows the
        kernel does not write show up in any comparison.
        """
        return aiter_decode(
            self.runtime(),
            q,
            kv_cache,
            decode,
            sm_scale=sm_scale,
            q_scale=q_scale,
            kv_scale=kv_scale,
        )
