"""The ``rocm`` backend: AITER's planner and decode behind the suite's `Backend` interface."""

from __future__ import annotations

from functools import cached_property
from typing import ClassVar

import torch

from backends.base import (
    AITER_V1,
    Availability,
    Backend,
    DecodeMetadata,
    DecodeScales,
    MetadataBuilder,
)
from backends.common import MLACommonBuilder
from backends.rocm.decode import aiter_decode
from backends.rocm.planner import AiterPlanner, AiterWorkPlan
from backends.rocm.probe import SUPPORTED_ARCHS, AiterRuntime, probe_runtime
from conformance.aiter_kernels import KernelTable
from conformance.errors import BackendUnavailable
from conformance.persistent.aiter_check import aiter_plan_matches_reference
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

FP8_DTYPES = (torch.float8_e4m3fnuz, torch.float8_e4m3fn)  # gfx942's flavour, gfx950's


class RocmAiterBuilder(MLACommonBuilder):
    """The shared builder, planning with AITER; `RocmAiterBackend` binds it to a device."""

    runtime: ClassVar[AiterRuntime | None] = None

    def make_planner(self) -> AiterPlanner:
        """AITER's planner on the bound device."""
        if self.runtime is None:
            raise BackendUnavailable(
                "RocmAiterBuilder is not bound to a device: use RocmAiterBackend().builder_cls()"
            )
        return AiterPlanner(self.runtime)


class RocmAiterBackend(Backend):
    """AMD AITER's persistent MLA decode (asm kernels) on an MI300 or MI350 GPU."""

    name: ClassVar[str] = "rocm"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL
    numerics: ClassVar[str] = "tensor-core"
    plan_format: ClassVar[str | None] = AITER_V1
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16, *FP8_DTYPES)
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16, *FP8_DTYPES)

    @cached_property
    def _probed(self) -> AiterRuntime | Availability:
        return probe_runtime()

    def availability(self) -> Availability:
        probed = self._probed
        return probed if isinstance(probed, Availability) else Availability(True)

    def kernel_table(self) -> KernelTable | None:
        """The installed AITER's MLA kernel table of the device's arch (None: no AITER here).
        Part of the declaration (`conformance.applicability.Declaration.kernels`): the suite
        derives from it which cases have no kernel and where the LSE is not comparable."""
        probed = self._probed
        return probed.kernels if isinstance(probed, AiterRuntime) else None

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

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Persistent ``aiter.mla.mla_decode_fwd`` over `decode.plan`.

        q ``[T, H, 576]`` and the cache ``[blocks, page, 576]`` in the planned dtypes
        (bf16, or AITER's fp8); returns out ``[T, H, 512]`` bf16 and the natural-log LSE
        ``[T, H]`` fp32, on the device. The output is prefilled with NaN, so rows the
        kernel does not write show up in any comparison. The LSE is None where AITER ships
        no LSE variant of the kernel (`kernel_table`); a shape with no kernel at all is
        refused before the call (`backends.rocm.decode.AiterWouldAbort`).
        """
        return aiter_decode(self.runtime(), q, kv_cache, decode, **scales.as_kwargs())
