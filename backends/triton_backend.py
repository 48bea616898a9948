"""The suite's NVIDIA backend: the persistent Triton MLA decode, on a GPU (`cuda`) or
under Triton's interpreter on the CPU (`interpret`).

Both plan for the ``triton`` profile: `cuda` with the device planner
(kernels/device_plan.py; ``MLA_TRITON_PLANNER=host`` selects the reference planner),
`interpret` with the reference planner on the host; the kernels walk the plan
(kernels/triton_mla/).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import ClassVar

import torch

from backends import base
from backends.base import Availability, DecodeScales
from backends.common import MLACommonBuilder, PlanExecutingBackend

INTERPRET_ENV = "TRITON_INTERPRET"
INTERPRETER_PROGRAMS = 4


def _triton_missing() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    return None


def cuda_device_count() -> int:
    """Number of NVIDIA devices torch sees (ROCm devices do not count)."""
    if torch.version.hip is not None or not torch.cuda.is_available():
        return 0
    return torch.cuda.device_count()


class TritonBuilder(MLACommonBuilder):
    """Shared builder planning for the ``triton`` profile."""

    default_arch: ClassVar[str] = "triton"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if self.device.type == "cuda":  # plan on the GPU (kernels/device_plan.py)
            from kernels.device_plan import builder_planner

            self.planner = builder_planner(self.device, self.planner)


class _TritonBackend(PlanExecutingBackend):
    numerics: ClassVar[str] = "tensor-core"

    def builder_cls(self) -> type[base.MetadataBuilder]:
        return TritonBuilder

    def plan_archs(self) -> tuple[str, ...]:
        return ("triton",)

    def decode_scaled(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        decode: base.DecodeMetadata,
        scales: DecodeScales,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from kernels.device_plan import for_launch
        from kernels.triton_mla import persistent_mla_decode

        plan = for_launch(base.require_plan(decode))  # a device plan: no host sync
        fp8_p = None
        if q.dtype == torch.float8_e4m3fnuz:
            # Hopper has no e4m3fnuz (gfx942's flavour); every such value is exact in bf16.
            # P is still rounded to fp8, as the fp8-q semantics require.
            q, fp8_p = q.to(torch.bfloat16), True
        if kv_cache.dtype == torch.float8_e4m3fnuz:
            kv_cache = kv_cache.to(torch.bfloat16)
        return persistent_mla_decode(
            q,
            kv_cache,
            plan,
            **base.csr_arguments(decode),
            qo_indptr=decode.query_start_loc,
            **scales.as_kwargs(),
            fp8_p=fp8_p,
        )


class CudaTritonBackend(_TritonBackend):
    """Triton kernels on an NVIDIA GPU."""

    name: ClassVar[str] = "cuda"

    def availability(self) -> Availability:
        missing = _triton_missing()
        if missing:
            return Availability(False, missing)
        if os.environ.get(INTERPRET_ENV) == "1":
            return Availability(False, f"{INTERPRET_ENV}=1 is set: use the interpret backend")
        if torch.version.hip is not None:
            return Availability(False, f"torch {torch.__version__} is a ROCm build, not CUDA")
        if not torch.cuda.is_available():
            build = "has no CUDA support" if torch.version.cuda is None else "sees no CUDA device"
            return Availability(False, f"no CUDA device: torch {torch.__version__} {build}")
        return Availability(True)

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device() if cuda_device_count() else 0)

    def default_num_cus(self) -> int:
        if not cuda_device_count():
            return 132
        return torch.cuda.get_device_properties(self.device).multi_processor_count


class InterpretTritonBackend(_TritonBackend):
    """The same Triton kernels under ``TRITON_INTERPRET=1`` on the CPU (tiny cases)."""

    name: ClassVar[str] = "interpret"
    tiny_cases_only: ClassVar[bool] = True

    def availability(self) -> Availability:
        missing = _triton_missing()
        if missing:
            return Availability(False, missing)
        if os.environ.get(INTERPRET_ENV) != "1" and "triton" in sys.modules:
            return Availability(
                False, f"triton was imported without {INTERPRET_ENV}=1 in this process"
            )
        return Availability(True)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def default_num_cus(self) -> int:
        return INTERPRETER_PROGRAMS
