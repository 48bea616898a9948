"""An engine target's own details, and the engine target as its session reads it (torch-free).

The engine's record (name, kind ``engine``, the release pinned by default, the releases its
driver supports, its environment, default and release membership) is its entry in
`conformance.targets.BUILTIN_TARGETS`; that entry names, in ``details``, the `EngineDetails`
here: the engine's PyPI distribution, the distributions its modules need at import time on a
CPU (installed at the versions the engine itself pins, without its GPU stack), what the
suite's tests need beside it, where they live, the modules that must import and the builders
it must build. `engine_target` joins the two; `nox -s <name>` (driven by
`conformance.ci.engine_session`) needs nothing else. A second engine is one more entry in
`BUILTIN_TARGETS`, its `EngineDetails` and its test package and driver module
(docs/engines.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, fields

from conformance.runs.names import junit_name
from conformance.targets import BUILTIN_TARGETS, ENGINE, Target, engine_names


@dataclass(frozen=True)
class EngineDetails:
    """What an engine's session installs and runs, beyond its record."""

    distribution: str
    runtime: tuple[str, ...]
    """Distributions the engine's record and builders import on a CPU; versions come from
    the engine's own requirement pins where it has one."""
    suite: tuple[str, ...]
    """What the suite's tests need beside the engine (pytest, safetensors, ...)."""
    tests: str
    probe_modules: tuple[str, ...]
    """Modules that must import for the target to run; the first failure is the reason."""
    must_build: tuple[str, ...]


@dataclass(frozen=True)
class EngineTarget(EngineDetails):
    """One engine the suite certifies on its own code: its details and its `record`."""

    record: Target

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def default_version(self) -> str:
        return str(self.record.version)

    @property
    def environment(self) -> Mapping[str, str]:
        return self.record.environment

    @property
    def device_kind(self) -> str:
        return self.record.device_kind

    def supports(self, version: str) -> str | None:
        """None if the driver supports `version`, else a one-line reason."""
        return self.record.supports(version)

    @property
    def junit(self) -> str:
        """The JUnit file name under reports/junit/."""
        return junit_name(self.name, None)

    def facts_file(self, version: str) -> str:
        """The facts file name under reports/engines/."""
        return f"{self.name}-{version}.facts.json"


VLLM_DETAILS = EngineDetails(
    distribution="vllm",
    runtime=(
        "packaging",
        "numpy",
        "psutil",
        "pyzmq",
        "regex",
        "transformers",
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
    suite=("pytest", "safetensors"),
    tests="tests/engines/vllm",
    probe_modules=(
        "vllm.v1.attention.backend",
        "vllm.model_executor.layers.attention.mla_attention",
        "vllm.v1.attention.backends.mla.triton_mla",
        "vllm.v1.attention.backends.mla.cpu_mla",
    ),
    must_build=("TRITON_MLA", "CPU_MLA", "ROCM_AITER_MLA"),
)


SGLANG_DETAILS = EngineDetails(
    distribution="sglang",
    runtime=(
        "packaging",
        "numpy",
        "psutil",
        "pyzmq",
        "regex",
        "transformers",
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
    suite=("pytest", "safetensors"),
    tests="tests/engines/sglang",
    probe_modules=(
        "sglang.srt.model_executor.forward_batch_info",
        "sglang.srt.layers.attention.attention_registry",
        "sglang.srt.layers.attention.triton_backend",
        "sglang.srt.layers.radix_attention",
    ),
    must_build=("triton", "torch_native", "aiter"),
)


def engine_target(name: str) -> EngineTarget:
    """The engine target `name` of `BUILTIN_TARGETS`, with the details its record names."""
    record = BUILTIN_TARGETS.get(name)
    if record is None or record.kind != ENGINE:
        raise KeyError(f"no engine target named {name!r} (known: {list(engine_names())})")
    module, _, attribute = str(record.details).partition(":")
    details = getattr(importlib.import_module(module), attribute)
    return EngineTarget(
        **{f.name: getattr(details, f.name) for f in fields(details)}, record=record
    )


VLLM = engine_target("vllm")
