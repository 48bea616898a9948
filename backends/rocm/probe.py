"""Whether the ROCm backend can run here: the device, AITER and AITER's persistent-path gate.

`probe_runtime` checks, in order, a ROCm torch, a gfx942/gfx950 device, the gate variable
(pinned off), an importable ``aiter`` whose API matches `backends.rocm.api`, and agreement
between the device and AITER on arch, CU count and fp8 flavour, and AITER's MLA kernel table
(`backends.rocm.kernel_table`). ``aiter`` is imported only
here, when the backend is probed. The selftests fake a ROCm machine by patching this
module's `torch_hip_version`, `probe_device` and `ALLOW_STANDIN`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import torch

from backends.base import Availability
from backends.rocm.api import (
    DECODE_KEYWORDS,
    DECODE_POSITIONAL,
    INFO_KEYWORDS,
    INFO_POSITIONAL,
    METADATA_KEYWORDS,
    METADATA_POSITIONAL,
    AiterApi,
    metadata_dtype_keywords,
    signature_problem,
)
from backends.rocm.kernel_table import installed_table
from conformance.aiter_kernels import KernelTable
from conformance.numerics.fp8 import fp8_dtype_for_arch

SUPPORTED_ARCHS: tuple[str, ...] = ("gfx942", "gfx950")
"""Archs with AITER persistent MLA decode kernels: MI300 (CDNA3) and MI350 (CDNA4)."""

PERSISTENT_GATE_ENV = "AITER_MLA_DECODE_PERSISTENT_MAX_BATCH"
"""AITER's batch-size gate on the persistent path; the adapter pins it to 0 (off)."""

ALLOW_STANDIN = False
"""Set to True only by the selftests that install the ``aiter`` stand-in (monkeypatch)."""


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


@dataclass(frozen=True)
class AiterRuntime:
    """A usable ROCm device with a checked AITER."""

    device: RocmDevice
    api: AiterApi
    kernels: KernelTable
    """The installed AITER's MLA kernel table of the device's arch (`kernel_table`)."""


# ---------------------------------------------------------------------------------------
# AITER's persistent-path gate


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


# ---------------------------------------------------------------------------------------
# The AITER API, resolved against the device and checked once


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
        signature_problem(
            aiter.get_mla_metadata_info_v1,
            "aiter.get_mla_metadata_info_v1",
            positional=INFO_POSITIONAL,
            keywords=INFO_KEYWORDS,
        )
        or signature_problem(
            aiter.get_mla_metadata_v1,
            "aiter.get_mla_metadata_v1",
            positional=METADATA_POSITIONAL,
            keywords=METADATA_KEYWORDS,
        )
        or signature_problem(
            mla.mla_decode_fwd,
            "aiter.mla.mla_decode_fwd",
            positional=DECODE_POSITIONAL,
            keywords=DECODE_KEYWORDS,
        )
    )
    if problem:
        return problem
    dtype_keywords = metadata_dtype_keywords(aiter.get_mla_metadata_v1)
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
    kernels = installed_table(api.arch, api.version)
    if isinstance(kernels, str):  # without it no decode can be kept from aborting
        return Availability(False, kernels)
    return AiterRuntime(device=device, api=api, kernels=kernels)


def persistent_gate_problem(api: AiterApi) -> str | None:
    """Why AITER could bypass the persistent path now, or None (checked before each decode).

    AITER reads the gate variable once and caches it; where its reader exists, the cached
    value is what counts, else the environment.
    """
    if api.gate is not None:
        return _gate_read_by_aiter(api.gate)
    return _pin_persistent_gate()
