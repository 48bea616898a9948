"""What an engine target is: how its environment is made and how its tests run (torch-free).

A target names the engine's PyPI distribution, the release the suite pins by default and
the releases its driver code supports, the distributions its modules need at import time
on a CPU (installed at the versions the engine itself pins, without its GPU stack), the
environment its tests run under and where they live. `nox -s <name>` (driven by
`conformance.ci.engine_session`) needs nothing else; a second engine is one more `EngineTarget`
in `TARGETS` plus its test package and driver module (docs/engines.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineTarget:
    """One engine the suite certifies on its own code."""

    name: str
    distribution: str
    default_version: str
    min_version: str
    """Oldest release the driver supports (inclusive)."""
    below_version: str
    """First release the driver is not known to support (exclusive)."""
    runtime: tuple[str, ...]
    """Distributions the engine's record and builders import on a CPU; versions come from
    the engine's own requirement pins where it has one."""
    suite: tuple[str, ...]
    """What the suite's tests need beside the engine (pytest, safetensors, ...)."""
    tests: str
    environment: Mapping[str, str] = field(default_factory=dict)
    probe_modules: tuple[str, ...] = ()
    """Modules that must import for the target to run; the first failure is the reason."""
    must_build: tuple[str, ...] = ()

    @property
    def junit(self) -> str:
        """The JUnit file name under reports/junit/."""
        return f"{self.name}.xml"

    def facts_file(self, version: str) -> str:
        """The facts file name under reports/engines/."""
        return f"{self.name}-{version}.facts.json"

    def supports(self, version: str) -> str | None:
        """None if the driver supports `version`, else a one-line reason."""
        if _key(version) < _key(self.min_version) or _key(version) >= _key(self.below_version):
            return (
                f"{self.name} {version} is outside the releases this suite drives "
                f"(>= {self.min_version}, < {self.below_version})"
            )
        return None


def _key(version: str) -> tuple[int, ...]:
    """``0.33.0`` → (0, 33, 0); a pre/post/local tail is ignored."""
    parts = []
    for part in version.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


VLLM = EngineTarget(
    name="vllm",
    distribution="vllm",
    default_version="0.33.0",
    min_version="0.33.0",
    below_version="0.35.0",
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
    environment={"VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"},
    probe_modules=(
        "vllm.v1.attention.backend",
        "vllm.model_executor.layers.attention.mla_attention",
        "vllm.v1.attention.backends.mla.triton_mla",
        "vllm.v1.attention.backends.mla.cpu_mla",
    ),
    must_build=("TRITON_MLA", "CPU_MLA", "ROCM_AITER_MLA"),
)

TARGETS: dict[str, EngineTarget] = {VLLM.name: VLLM}
