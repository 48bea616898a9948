"""The CPU reference backend: the shared builder, the reference planner, fp32 plan execution."""

from __future__ import annotations

from typing import ClassVar

import torch

from backends.base import (
    Availability,
    Backend,
    DecodeMetadata,
    MetadataBuilder,
    require_plan,
)
from backends.common import MLACommonBuilder
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL


class CpuReferenceBuilder(MLACommonBuilder):
    """The reference builder; plans with the reference planner for any profile."""

    default_arch: ClassVar[str] = "gfx942"
    default_num_cus: ClassVar[int] = 8


class CpuReferenceBackend(Backend):
    """PyTorch reference: executes the work plan work by work in fp32 on the CPU."""

    name: ClassVar[str] = "cpu"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL

    def availability(self) -> Availability:
        return Availability(True)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def builder_cls(self) -> type[MetadataBuilder]:
        return CpuReferenceBuilder

    def plan_archs(self) -> tuple[str, ...]:
        return ("gfx942", "gfx950", "triton")

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
        from kernels.plan_exec import execute_plan

        plan = require_plan(decode)
        result = execute_plan(
            plan,
            q,
            kv_cache,
            kv_indptr=decode.kv_indptr,
            kv_indices=decode.kv_indices,
            kv_last_page_lens=decode.kv_last_page_lens,
            page_size=decode.page_size,
            sm_scale=sm_scale,
            q_scale=q_scale,
            kv_scale=kv_scale,
            causal=decode.causal,
        )
        return result.out.to(torch.bfloat16), result.lse
