"""The CPU reference backend: the shared builder, the reference planner, fp32 plan execution."""

from __future__ import annotations

from typing import ClassVar

import torch

from backends.base import (
    Availability,
    DecodeMetadata,
    DecodeScales,
    MetadataBuilder,
    csr_arguments,
    require_plan,
)
from backends.common import MLACommonBuilder, PlanExecutingBackend


class CpuReferenceBuilder(MLACommonBuilder):
    """The reference builder; plans with the reference planner for any profile."""

    default_arch: ClassVar[str] = "gfx942"
    default_num_cus: ClassVar[int] = 8


class CpuReferenceBackend(PlanExecutingBackend):
    """PyTorch reference: executes the work plan work by work in fp32 on the CPU."""

    name: ClassVar[str] = "cpu"

    def availability(self) -> Availability:
        return Availability(True)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def builder_cls(self) -> type[MetadataBuilder]:
        return CpuReferenceBuilder

    def plan_archs(self) -> tuple[str, ...]:
        return ("gfx942", "gfx950", "triton")

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from kernels.plan_exec import execute_plan

        plan = require_plan(decode)
        result = execute_plan(plan, q, kv_cache, **csr_arguments(decode), **scales.as_kwargs())
        return result.out.to(torch.bfloat16), result.lse
