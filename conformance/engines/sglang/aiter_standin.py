"""The ``aiter`` SGLang's aiter backend imports on a CPU: the suite's planner and a kernel spy.

SGLang's `AiterAttnBackend` imports more of AITER than vLLM's builder: prefill and decode
kernels (``aiter.mla.mla_decode_fwd``, ...), Triton helpers under ``aiter.ops.triton`` and
``aiter.dtypes``. `SglangAiterStandin` extends the vLLM stand-in (the same planner and sizing
with AITER's signatures) with those names: ``mla_decode_fwd`` records the q and KV dtypes
and shapes the kernel is given (`KernelCall`) and computes nothing; every other kernel is a
placeholder that refuses to run, naming itself. `device_to_cpu` runs SGLang's code with its
``device="cuda"`` buffers made on the CPU. fp8 is HIP's ``float8_e4m3fnuz`` (gfx942).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from conformance.engines.vllm.aiter_standin import AiterStandin, install_standin, standin_module

HIP_FP8 = torch.float8_e4m3fnuz
PLACEHOLDER_KERNELS = {
    "aiter": (
        "flash_attn_varlen_fp8_pertensor_func",
        "flash_attn_varlen_func",
        "get_ps_metadata_info_v1",
        "get_ps_metadata_v1",
        "mha_batch_prefill_func",
        "mla_prefill_ps_asm_fwd",
        "mla_reduce_v1",
        "paged_attention_ragged",
    ),
    "aiter.mla": ("mla_prefill_fwd",),
    "aiter.ops.triton.attention.unified_attention": ("unified_attention",),
    "aiter.ops.triton.gluon.pa_decode_gluon": ("pa_decode_gluon", "get_recommended_splits"),
}
PACKAGES = (
    "aiter.ops",
    "aiter.ops.triton",
    "aiter.ops.triton.attention",
    "aiter.ops.triton.gluon",
    "aiter.ops.triton.utils",
    "aiter.ops.triton.utils._triton",
)


@dataclass(frozen=True)
class KernelCall:
    """One ``mla_decode_fwd`` call: the dtypes and shapes the kernel was given."""

    q_dtype: torch.dtype
    kv_dtype: torch.dtype
    q_shape: tuple[int, ...]
    arguments: dict[str, Any]


def _placeholder(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"aiter stand-in: {name} is not modelled (not AMD AITER)")

    refuse.__name__ = name.rsplit(".", 1)[-1]
    return refuse


def _kernel_repr(name: str, *args: Any, **kwargs: Any) -> Callable[..., str]:
    """``aiter.ops.triton.utils._triton.kernel_repr.make_kernel_repr``: a kernel's name."""
    return lambda *a, **k: str(name)


@dataclass(eq=False)
class SglangAiterStandin(AiterStandin):
    """AITER's planner (the suite's reference) and a spy on the decode kernel, for SGLang."""

    kernel_calls: list[KernelCall] = field(default_factory=list)

    def mla_decode_fwd(self, q: torch.Tensor, kv_buffer: torch.Tensor, o: torch.Tensor, **kw: Any):
        """Record the dtypes the decode kernel is given; compute nothing."""
        self.kernel_calls.append(KernelCall(q.dtype, kv_buffer.dtype, tuple(q.shape), dict(kw)))
        return None, None

    def build_modules(self) -> dict[str, Any]:
        modules = super().build_modules()
        for package in PACKAGES:
            modules[package] = standin_module(package, __path__=[])
        for module, names in PLACEHOLDER_KERNELS.items():
            found = modules.get(module) or standin_module(module)
            for name in names:
                setattr(found, name, _placeholder(f"{module}.{name}"))
            modules[module] = found
        modules["aiter.mla"].mla_decode_fwd = self.mla_decode_fwd
        modules["aiter"].mla = modules["aiter.mla"]
        modules["aiter.ops.triton.utils._triton.kernel_repr"] = standin_module(
            "aiter.ops.triton.utils._triton.kernel_repr", make_kernel_repr=_kernel_repr
        )
        modules["aiter.ops.triton.utils.types"] = standin_module(
            "aiter.ops.triton.utils.types", e4m3_dtype=self.fp8
        )
        return modules


class DeviceToCpu(TorchFunctionMode):
    """Tensors SGLang asks for on ``cuda`` are made on the CPU (the buffers of its backends)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        kwargs = dict(kwargs or {})
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


@contextlib.contextmanager
def device_to_cpu() -> Iterator[None]:
    """Run SGLang's backend code with its ``cuda`` buffers on the CPU."""
    with DeviceToCpu():
        yield


_STANDIN: SglangAiterStandin | None = None


def standin(arch: str = "gfx942", num_cus: int = 304) -> SglangAiterStandin:
    """The one stand-in of this process; installed before SGLang's aiter backend imports."""
    global _STANDIN
    if _STANDIN is None:
        _STANDIN = SglangAiterStandin(arch=arch, num_cus=num_cus, fp8=HIP_FP8)
        install_standin(_STANDIN)
    _STANDIN.arch, _STANDIN.num_cus = arch, num_cus
    return _STANDIN
