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
from dataclasses import dataclass, field, fields
from typing import Any

from conformance.runs.names import junit_name
from conformance.targets import BUILTIN_TARGETS, ENGINE, Target, engine_names


@dataclass(frozen=True)
class Release:
    """One release of an engine's release matrix: its own pins, and its known findings."""

    pins: tuple[str, ...] = ()
    """``NAME==VERSION`` in place of the release's own pin of NAME (as ``--pin``)."""
    findings: Mapping[str, str] = field(default_factory=dict)
    """Engine test (``file.py::test[param]``) → the engine's code that makes it fail on this
    release: a finding the target reports, run as a strict xfail (it must still fail)."""


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
    quiet_warnings: tuple[str, ...] = ()
    """pytest ``filterwarnings`` entries (regex module names) for the deprecation warnings the
    engine's own stack raises as it imports; the engine tests' conftest adds them, so a run
    shows the warnings of the code under test, not dozens of its dependencies'."""
    releases: Mapping[str, Release] = field(default_factory=dict)
    """The release matrix: each release the driver is measured on, with its own pins and
    known findings (none: the pinned release alone, no pins of its own)."""
    option_name: str | None = None
    """The name in its session's options (``--<name>-version``); None: the target's name."""
    whole_install: bool = False
    """Install the engine with every dependency it declares (its GPU stack: a GPU target),
    instead of `runtime` alone at its pins beside a CPU torch."""
    measures_facts: bool = True
    """Whether its tests measure an engine facts file (``reports/engines/``, SHA256SUMS);
    else they write only the run's statuses, beside its JUnit report."""


@dataclass(frozen=True)
class EngineTarget(EngineDetails):
    """One engine the suite certifies on its own code: its details and its `record`."""

    record: Target = field(kw_only=True)

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
    def option(self) -> str:
        """The name its session's options carry: ``--<option>-version``."""
        return self.option_name or self.name

    @property
    def junit(self) -> str:
        """The JUnit file name under reports/junit/."""
        return junit_name(self.name, None)

    def release_pins(self, version: str) -> tuple[str, ...]:
        """The pins the release matrix gives `version` (none for a release it does not list)."""
        return self.releases.get(version, Release()).pins

    def known_findings(self, version: str) -> Mapping[str, str]:
        """The engine tests that fail on `version` because of the engine's own code."""
        return self.releases.get(version, Release()).findings

    def facts_file(self, version: str) -> str:
        """The facts file name under reports/engines/ (a target measuring no facts: the
        statuses file beside its JUnit report)."""
        if not self.measures_facts:
            return f"{self.name}.statuses.json"
        return f"{self.name}-{version}.facts.json"


UNPADDED_DROPS_UPPER_BOUND = {
    "test_family_a.py::test_transformation_keeps_every_needed_field[unpadded]": (
        "vllm/v1/attention/backend.py: CommonAttentionMetadata.unpadded() rebuilds the record "
        "without seq_lens_cpu_upper_bound, which the MLA builders need on mixed batches"
    ),
}

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
    quiet_warnings=(
        # vLLM's import of flashinfer's CuTe DSL kernels (cutlass.utils.* renamed) and of
        # torch.jit-scripted helpers; raised in the engine's stack, not in the suite
        r"ignore::DeprecationWarning:(vllm|flashinfer|cutlass|torch\.jit)(\.|$)",
        r"ignore::FutureWarning:(vllm|flashinfer|cutlass)(\.|$)",
    ),
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
)


TRITON_MLA_LSE_IN_Q_DTYPE = (
    "vllm/v1/attention/backends/mla/triton_mla.py: TritonMLAImpl.forward_mqa allocates the "
    "LSE in q's dtype (lse = torch.zeros(B, q_num_heads, dtype=q.dtype)), so a bf16 q gets a "
    "bf16 LSE, rounded by up to 2**-9 of its value (0.016 at an LSE of 5, about 18 times the "
    "derived bound); vLLM merges the decode context-parallel ranks' outputs with it "
    "(supports_dcp = True)"
)

VLLM_GPU_DETAILS = EngineDetails(
    distribution="vllm",
    runtime=(),
    suite=("pytest", "safetensors"),
    tests="tests/engines/vllm_gpu",
    probe_modules=(
        "vllm.v1.attention.backend",
        "vllm.v1.attention.backends.mla.triton_mla",
        "vllm.v1.attention.backends.mla.flashmla",
    ),
    must_build=("TRITON_MLA", "FLASHMLA"),
    quiet_warnings=VLLM_DETAILS.quiet_warnings,
    releases={
        "0.33.0": Release(
            findings={
                "test_decode.py::test_lse_matches_golden[TRITON_MLA-*": TRITON_MLA_LSE_IN_Q_DTYPE,
            }
        ),
    },
    option_name="vllm",
    whole_install=True,
    measures_facts=False,
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


def add_warning_filters(config: Any, target: EngineTarget) -> None:
    """Add `target`'s ``quiet_warnings`` to a pytest `config`'s ``filterwarnings``."""
    for entry in target.quiet_warnings:
        config.addinivalue_line("filterwarnings", entry)


def finding_matches(nodeid: str, test: str) -> bool:
    """Whether a finding's test names `nodeid`: its end, or (a test ending in ``*``) every
    node id whose end starts with the rest (``test.py::test_x[TRITON_MLA-*``)."""
    if test.endswith("*"):
        stem = test[:-1]
        return f"/{stem}" in f"/{nodeid}" or nodeid.startswith(stem)
    return nodeid.endswith(test)


def mark_known_findings(items: list[Any], findings: Mapping[str, str]) -> list[str]:
    """Mark the engine tests of `findings` (matched by `finding_matches`) as strict xfails;
    returns the findings no collected test matched (stale entries)."""
    import pytest

    matched = set()
    for item in items:
        for test, reason in findings.items():
            if finding_matches(item.nodeid, test):
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"known finding: {reason}"))
                matched.add(test)
    return sorted(set(findings) - matched)
