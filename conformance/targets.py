"""Every target the suite tests, declared once: the built-in backends, the engines, and what a
device kind means.

`BUILTIN_TARGETS` holds each built-in target's facts (the types are those of
`conformance.target_types`): a backend's class, its device kind, the files whose hashes
fingerprint its evidence, the environment its runs need, whether a plain ``nox`` and a plain
sign-off include it (``default``) and whether a release requires it (``release``); an engine's
distribution, pinned and supported releases, Python, environment, what its session installs
and the builders it must build. Everything that depends on the device (the visible-devices
variable, xdist workers, CI runner, queue and timeout, nox tags, whether a run must name its
GPUs) keys on the device kind, through `DEVICE_KINDS`, never on a name; `device_of` is the one
lookup of a target's device kind.

A plug-in backend declares the same facts as class attributes of its `Backend` class
(``device_kind``, ``behaviour_files``, ``environment``); `declared` reads them.

This module imports nothing of the suite but `conformance.target_types`, and never torch: the
registry, the pytest plugins, the sign-off, the CI generators and the noxfile all read it.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from conformance.target_types import (
    BackendTarget,
    DeviceKind,
    EngineTarget,
    Release,
    Target,
)

ENTRY_POINT_GROUP = "mla_conformance.backends"

CPU = DeviceKind("cpu", None, "ubuntu-latest", "default", 45, ("cpu",))
CUDA = DeviceKind(
    "cuda", "CUDA_VISIBLE_DEVICES", ("self-hosted", "nvidia"), "nvidia", 90, ("gpu", "cuda")
)
ROCM = DeviceKind("rocm", "HIP_VISIBLE_DEVICES", ("self-hosted", "amd"), "amd", 90, ("gpu", "rocm"))
DEVICE_KINDS: dict[str, DeviceKind] = {kind.name: kind for kind in (CPU, CUDA, ROCM)}
"""Every device kind by name; a new kind is one more entry, which every consumer sees."""

TRITON_FILES = (
    "backends/triton_backend.py",
    "kernels/triton_mla/*.py",
    "kernels/plan_slice.py",
)

UNPADDED_DROPS_UPPER_BOUND = {
    "test_family_a.py::test_transformation_keeps_every_needed_field[unpadded]": (
        "vllm/v1/attention/backend.py: CommonAttentionMetadata.unpadded() rebuilds the record "
        "without seq_lens_cpu_upper_bound, which the MLA builders need on mixed batches"
    ),
}

VLLM_QUIET_WARNINGS = (
    # vLLM's import of flashinfer's CuTe DSL kernels (cutlass.utils.* renamed) and of
    # torch.jit-scripted helpers; raised in the engine's stack, not in the suite
    r"ignore::DeprecationWarning:(vllm|flashinfer|cutlass|torch\.jit)(\.|$)",
    r"ignore::FutureWarning:(vllm|flashinfer|cutlass)(\.|$)",
)
CPU_ENGINE_RUNTIME = ("packaging", "numpy", "psutil", "pyzmq", "regex", "transformers")
"""What the record and builders of every CPU engine import; each engine's `runtime` starts
with these and adds its own."""
ENGINE_SUITE = ("pytest", "safetensors")
"""What every engine's tests need beside the engine."""
TRITON_MLA_LSE_IN_Q_DTYPE = (
    "vllm/v1/attention/backends/mla/triton_mla.py: TritonMLAImpl.forward_mqa allocates the "
    "LSE in q's dtype (lse = torch.zeros(B, q_num_heads, dtype=q.dtype)), so a bf16 q gets a "
    "bf16 LSE, rounded by up to 2**-9 of its value (0.016 at an LSE of 5, about 18 times the "
    "derived bound); vLLM merges the decode context-parallel ranks' outputs with it "
    "(supports_dcp = True)"
)

BUILTIN_TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        BackendTarget(
            name="cpu",
            description="Conformance run of the CPU reference backend.",
            class_path="backends.cpu:CpuReferenceBackend",
            device=CPU,
            behaviour_files=(
                "backends/cpu.py",
                "kernels/plan_exec.py",
                "kernels/reference.py",
                "kernels/paged.py",
            ),
            default=True,
            release=True,
        ),
        BackendTarget(
            name="interpret",
            description="Conformance run of the Triton kernels under TRITON_INTERPRET=1 on the "
            "CPU.",
            class_path="backends.triton_backend:InterpretTritonBackend",
            device=CPU,
            behaviour_files=(*TRITON_FILES, "kernels/paged.py"),
            environment={"TRITON_INTERPRET": "1"},  # Triton reads it once, when imported
            default=True,
        ),
        BackendTarget(
            name="cuda",
            description="Conformance run of the Triton CUDA backend (a skipped session without a "
            "GPU).",
            class_path="backends.triton_backend:CudaTritonBackend",
            device=CUDA,
            behaviour_files=(  # on a GPU: the device planner, and the Gluon decode on Hopper
                *TRITON_FILES,
                "kernels/gluon_mla/*.py",
                "kernels/device_plan.py",
                "kernels/planner_setup.py",
                "kernels/planner_chain.py",
                "kernels/planner_finish.py",
                "kernels/triton_planner.py",
                "kernels/paged.py",
            ),
            default=True,
            release=True,
        ),
        BackendTarget(
            name="rocm",
            description="Conformance run of the AMD AITER backend (a skipped session without "
            "ROCm).",
            class_path="backends.rocm:RocmAiterBackend",
            device=ROCM,
            behaviour_files=("backends/rocm/*.py", "kernels/paged.py"),
            environment={"AITER_MLA_DECODE_PERSISTENT_MAX_BATCH": "0"},
            default=True,
            release=True,
        ),
        BackendTarget(
            name="flashinfer",
            description="Conformance run of FlashInfer's MLA (a skipped session without it or a "
            "GPU).",
            class_path="backends.flashinfer_backend:FlashInferBackend",
            device=CUDA,
            behaviour_files=("backends/flashinfer_backend.py",),
        ),
        BackendTarget(
            name="flashmla",
            description="Conformance run of DeepSeek's FlashMLA decode (a skipped session without "
            "it or a Hopper GPU).",
            class_path="backends.flashmla:FlashMLABackend",
            device=CUDA,
            behaviour_files=("backends/flashmla/*.py", "conformance/goldens/relayout.py"),
        ),
        EngineTarget(
            name="vllm",
            description="vLLM's own record and MLA builders under the families (docs/engines.md).",
            device=CPU,
            environment={
                "VLLM_TARGET_DEVICE": "cpu",
                "CUDA_VISIBLE_DEVICES": "",
                "TRITON_INTERPRET": "1",
            },
            version="0.33.0",
            min_version="0.28.0",
            below_version="0.35.0",
            distribution="vllm",
            runtime=(
                *CPU_ENGINE_RUNTIME,
                "cbor2",
                "aiohttp",
                "requests",
                "openai-harmony",
                "openai",
                "pillow",
                "pybase64",
                "cachetools",
                "msgspec",
                "cloudpickle",
                "uvloop",
                "py-cpuinfo",
                "prometheus_client",
                "xgrammar",
                "fastapi",
                "partial-json-parser",
                "llguidance",
                "einops",
                "flashinfer-python",
                "pyyaml",
            ),
            suite=ENGINE_SUITE,
            tests="tests/engines/vllm",
            probe_modules=(
                "vllm.v1.attention.backend",
                "vllm.model_executor.layers.attention.mla_attention",
                "vllm.v1.attention.backends.mla.triton_mla",
                "vllm.v1.attention.backends.mla.cpu_mla",
            ),
            must_build=("TRITON_MLA", "CPU_MLA", "ROCM_AITER_MLA"),
            quiet_warnings=VLLM_QUIET_WARNINGS,
            releases={
                # 0.28.0 is the first release whose MLA builders read the five dims from the layers
                # (MLACommonMetadataBuilder.__init__: self.mla_dims = MLADims(q_lora_rank=layer...);
                # 0.27.0 reads them from the model config: get_mla_dims(self.model_config)).
                # 0.28.0 to 0.30.0 require transformers>=5.10.4 unbounded: the newest (5.25) imports
                # the `kernels` distribution, whose name the suite's own kernels/ package shadows;
                # 5.17.0 is what 0.31.0 (<5.18.0) resolves to
                "0.28.0": Release(("transformers==5.17.0",), UNPADDED_DROPS_UPPER_BOUND),
                "0.29.0": Release(("transformers==5.17.0",), UNPADDED_DROPS_UPPER_BOUND),
                "0.30.0": Release(("transformers==5.17.0",)),
                "0.31.0": Release(),
                "0.32.0": Release(),
                "0.33.0": Release(),
                # 0.34.0 pins flashinfer-python==0.7.3, which the package index does not hold
                "0.34.0": Release(("flashinfer-python==0.7.4",)),
            },
        ),
        EngineTarget(
            name="vllm_gpu",
            description="vLLM's own MLA decode (TRITON_MLA, FLASHMLA) on a CUDA GPU under the "
            "numerics and masking families (docs/engines.md).",
            device=CUDA,
            behaviour_files=("conformance/engines/vllm/*.py", "tests/engines/vllm_gpu/*.py"),
            distribution="vllm",
            version="0.33.0",
            min_version="0.33.0",
            below_version="0.35.0",
            runtime=(),
            suite=ENGINE_SUITE,
            tests="tests/engines/vllm_gpu",
            probe_modules=(
                "vllm.v1.attention.backend",
                "vllm.v1.attention.backends.mla.triton_mla",
                "vllm.v1.attention.backends.mla.flashmla",
            ),
            must_build=("TRITON_MLA", "FLASHMLA"),
            quiet_warnings=VLLM_QUIET_WARNINGS,
            releases={
                "0.33.0": Release(
                    findings={
                        "test_decode.py::test_lse_matches_golden[TRITON_MLA-*": (
                            TRITON_MLA_LSE_IN_Q_DTYPE
                        ),
                    }
                ),
            },
            option_name="vllm",
            whole_install=True,
            measures_facts=False,
        ),
        EngineTarget(
            name="sglang",
            description="SGLang's own ForwardBatch, MLA backends and RadixAttention under the "
            "families (docs/engines.md).",
            device=CPU,
            environment={"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"},
            version="0.5.23",
            min_version="0.5.23",
            below_version="0.6.0",
            python="3.11",  # the only Python SGLang's wheel is built for
            distribution="sglang",
            runtime=(
                *CPU_ENGINE_RUNTIME,
                "pydantic",
                "msgspec",
                "orjson",
                "fastapi",
                "uvicorn",
                "requests",
                "aiohttp",
                "uvloop",
                "einops",
                "pybase64",
                "setproctitle",
                "pillow",
                "partial_json_parser",
                "tqdm",
                "ipython",
                "dill",
                "sentencepiece",
                "apache-tvm-ffi",
                "compressed-tensors",
                "gguf",
                "openai",
                "triton",
                # SGLang's configs import torchvision; PyPI's would replace the CPU torch
                "./conformance/engines/sglang/torchvision_standin",
            ),
            suite=ENGINE_SUITE,
            tests="tests/engines/sglang",
            probe_modules=(
                "sglang.srt.model_executor.forward_batch_info",
                "sglang.srt.layers.attention.attention_registry",
                "sglang.srt.layers.attention.triton_backend",
                "sglang.srt.layers.radix_attention",
            ),
            must_build=("triton", "torch_native", "aiter"),
        ),
    )
}


def builtin_backends() -> dict[str, str]:
    """``{name: "module:Class"}`` of the built-in backends, in declaration order."""
    return {
        name: target.class_path
        for name, target in BUILTIN_TARGETS.items()
        if isinstance(target, BackendTarget)
    }


def engine_names() -> tuple[str, ...]:
    """The engine targets, in declaration order."""
    return tuple(
        name for name, target in BUILTIN_TARGETS.items() if isinstance(target, EngineTarget)
    )


def default_names() -> tuple[str, ...]:
    """Targets a plain ``nox`` runs and a plain sign-off expects."""
    return tuple(name for name, target in BUILTIN_TARGETS.items() if target.default)


def release_names() -> tuple[str, ...]:
    """Targets a release sign-off requires."""
    return tuple(name for name, target in BUILTIN_TARGETS.items() if target.release)


@cache
def plugin_entry_points() -> dict[str, str]:
    """``{name: "module:Class"}`` of the third-party backends installed here."""
    found = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in BUILTIN_TARGETS:
            found[point.name] = point.value
    return found


def load_class(class_path: str) -> Any:
    """The object ``module:Class`` names (importing its module)."""
    module, _, attribute = class_path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def plugin_target(name: str, backend_class: Any, class_path: str) -> BackendTarget:
    """A plug-in's declaration, read from its `Backend` class attributes (with defaults);
    `ValueError` for a device kind `DEVICE_KINDS` does not hold."""
    doc = (getattr(backend_class, "__doc__", None) or "").strip()
    kind = str(getattr(backend_class, "device_kind", None) or CPU.name)
    if kind not in DEVICE_KINDS:
        raise ValueError(
            f"target {name!r}: device_kind: expected one of {sorted(DEVICE_KINDS)}, found {kind!r}"
        )
    return BackendTarget(
        name=name,
        description=doc.splitlines()[0]
        if doc
        else f"Conformance run of the plug-in backend {name}.",
        class_path=class_path,
        device=DEVICE_KINDS[kind],
        behaviour_files=tuple(getattr(backend_class, "behaviour_files", ()) or ()),
        environment=dict(getattr(backend_class, "environment", {}) or {}),
    )


def declared(name: str, *, load_plugins: bool = True) -> Target | None:
    """The declaration of target ``name``: the built-in table's, else an installed plug-in's
    (importing its module unless ``load_plugins`` is false); None when nobody declares it."""
    if name in BUILTIN_TARGETS:
        return BUILTIN_TARGETS[name]
    if not load_plugins:
        return None
    class_path = plugin_entry_points().get(name)
    if class_path is None:
        return None
    try:
        return plugin_target(name, load_class(class_path), class_path)
    except Exception:  # a plug-in that does not load declares nothing; the registry says why
        return None


def device_of(name: str, *, load_plugins: bool = True) -> DeviceKind | None:
    """The `DeviceKind` target ``name`` declares, built-in or plug-in (a plug-in's module is
    imported unless ``load_plugins`` is false); None when nobody declares it.

    The one lookup of a target's device facts: GPU pinning, xdist workers, the CI runner,
    queue and timeout, the provenance a run records and what the sign-off expects of it.
    """
    target = declared(name, load_plugins=load_plugins)
    return None if target is None else target.device
