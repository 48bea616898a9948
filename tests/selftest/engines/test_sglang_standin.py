"""SGLang's AITER stand-in without SGLang: the kernel spy, the placeholders, the CPU buffers."""

from __future__ import annotations

import pytest
import torch

from conformance.engines.sglang.aiter_standin import (
    HIP_FP8,
    PLACEHOLDER_KERNELS,
    SglangAiterStandin,
    device_to_cpu,
)


def _modules() -> tuple[SglangAiterStandin, dict]:
    standin = SglangAiterStandin(arch="gfx942", num_cus=304, fp8=HIP_FP8)
    return standin, standin.build_modules()


def test_the_decode_spy_records_the_dtypes_the_kernel_is_given() -> None:
    standin, modules = _modules()
    q = torch.zeros(3, 16, 576, dtype=torch.bfloat16)
    kv = torch.zeros(10, 1, 1, 576).to(HIP_FP8)
    modules["aiter.mla"].mla_decode_fwd(q, kv, torch.empty(0), max_seqlen_q=1)
    (call,) = standin.kernel_calls
    assert (call.q_dtype, call.kv_dtype, call.q_shape) == (torch.bfloat16, HIP_FP8, (3, 16, 576))
    assert call.arguments == {"max_seqlen_q": 1}


@pytest.mark.parametrize(
    ("module", "name"), [(m, n) for m, names in PLACEHOLDER_KERNELS.items() for n in names]
)
def test_an_unmodelled_kernel_refuses_to_run_naming_itself(module, name) -> None:
    _, modules = _modules()
    with pytest.raises(NotImplementedError, match=f"{module}.{name} is not modelled"):
        getattr(modules[module], name)()


def test_the_modules_say_they_are_a_standin_and_carry_hip_fp8() -> None:
    _, modules = _modules()
    assert all(getattr(m, "__standin__", False) for m in modules.values())
    assert modules["aiter.ops.triton.utils.types"].e4m3_dtype is torch.float8_e4m3fnuz
    assert modules["aiter.dtypes"].fp8 is torch.float8_e4m3fnuz
    assert modules["aiter.ops.triton.utils._triton.kernel_repr"].make_kernel_repr("k")() == "k"


def test_buffers_asked_for_on_cuda_are_made_on_the_cpu() -> None:
    with device_to_cpu():
        made = torch.empty(4, dtype=torch.int32, device="cuda")
        zeros = torch.zeros((2,), device=torch.device("cuda", 0))
    assert made.device.type == "cpu" and zeros.device.type == "cpu"
    with pytest.raises((RuntimeError, AssertionError)):  # outside: the real request
        torch.empty(1, device="cuda")
