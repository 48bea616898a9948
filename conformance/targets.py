"""Every target the suite tests, declared once: the built-in backends, the engines, and what a
device kind means.

A target is a *backend* (a `Backend` class the registry loads) or an *engine* (a serving engine
tested in its own environment; it has no `Backend` class, but a pinned release, the releases
its driver supports and ``details``, a reference to its `conformance.engines.target.EngineDetails`).
`BUILTIN_TARGETS` holds each built-in target's facts: its class, its device kind, the files whose
hashes fingerprint its evidence, the environment its runs need, whether a plain ``nox`` and a
plain sign-off include it (``default``) and whether a release requires it (``release``).
Everything that depends on the device (the visible-devices variable, xdist workers, CI runner,
queue and timeout, nox tags) keys on the device kind, through `DEVICE_KINDS`, never on a name.

A plug-in backend declares the same facts as class attributes of its `Backend` class
(``device_kind``, ``behaviour_files``, ``environment``); `declared` reads them.

This module imports nothing of the suite and never torch: the registry, the pytest plugins,
the sign-off, the CI generators and the noxfile all read it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any

ENTRY_POINT_GROUP = "mla_conformance.backends"
BACKEND, ENGINE = "backend", "engine"


@dataclass(frozen=True)
class DeviceKind:
    """What running on one kind of device means for workers, CI and nox."""

    name: str
    visible_devices: str | None
    """The variable that limits a process to some devices (None: a CPU)."""
    runner: str | tuple[str, ...]
    """GitHub Actions ``runs-on`` labels of its CI jobs."""
    queue: str
    """Buildkite agent queue of its CI jobs."""
    timeout_minutes: int
    tags: tuple[str, ...]
    """nox session tags; ``nox --json -l -t cpu gpu`` lists the CI's sessions."""

    @property
    def is_gpu(self) -> bool:
        """Whether its runs use GPUs (one xdist worker per GPU, each pinned to its own)."""
        return self.visible_devices is not None


DEVICE_KINDS: Mapping[str, DeviceKind] = MappingProxyType(
    {
        "cpu": DeviceKind("cpu", None, "ubuntu-latest", "default", 45, ("cpu",)),
        "cuda": DeviceKind(
            "cuda", "CUDA_VISIBLE_DEVICES", ("self-hosted", "nvidia"), "nvidia", 90, ("gpu", "cuda")
        ),
        "rocm": DeviceKind(
            "rocm", "HIP_VISIBLE_DEVICES", ("self-hosted", "amd"), "amd", 90, ("gpu", "rocm")
        ),
    }
)
DEFAULT_DEVICE_KIND = "cpu"


@dataclass(frozen=True)
class Target:
    """One target's facts (see the module docstring)."""

    name: str
    description: str
    class_path: str | None = None
    """``module:Class`` of a backend; None for an engine."""
    kind: str = BACKEND
    device_kind: str = DEFAULT_DEVICE_KIND
    behaviour_files: tuple[str, ...] = ()
    """Glob patterns, relative to the repository, of the files that decide its behaviour."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """Variables its runs set (if unset) before its tests import anything."""
    default: bool = False
    """A plain ``nox`` runs it; a plain sign-off expects it."""
    release: bool = False
    """A release sign-off requires it."""
    version: str | None = None
    """An engine's release pinned by default."""
    min_version: str | None = None
    """Oldest engine release its driver supports (inclusive)."""
    below_version: str | None = None
    """First engine release its driver is not known to support (exclusive)."""
    details: str | None = None
    """``module:NAME`` of an engine's own details (distribution, runtime, tests, the builders
    it must build): `conformance.engines.target.EngineDetails`."""

    def __post_init__(self) -> None:
        problems = declaration_problems(self)
        if problems:
            raise ValueError(f"target {self.name!r}: {'; '.join(problems)}")

    @property
    def device(self) -> DeviceKind:
        """The `DeviceKind` it runs on."""
        return DEVICE_KINDS[self.device_kind]

    def supports(self, version: str) -> str | None:
        """None if an engine's driver supports `version`, else a one-line reason."""
        low, high = str(self.min_version), str(self.below_version)
        if not _version_key(low) <= _version_key(version) < _version_key(high):
            return (
                f"{self.name} {version} is outside the releases this suite drives "
                f"(>= {low}, < {high})"
            )
        return None


def _version_key(version: str) -> tuple[int, ...]:
    """``0.33.0`` → (0, 33, 0); a pre/post/local tail is ignored."""
    parts = []
    for part in version.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def declaration_problems(target: Target) -> list[str]:
    """What is wrong with a declaration (empty when nothing is)."""
    problems = []
    if target.kind not in (BACKEND, ENGINE):
        problems.append(f"kind: expected {BACKEND!r} or {ENGINE!r}, found {target.kind!r}")
    if target.kind == BACKEND and not target.class_path:
        problems.append("class_path: a backend needs its 'module:Class'")
    engine_facts = ("version", "min_version", "below_version", "details")
    if target.kind == ENGINE:
        problems.extend(
            f"{name}: an engine needs it" for name in engine_facts if not getattr(target, name)
        )
    if target.class_path is not None and ":" not in target.class_path:
        problems.append(f"class_path: expected 'module:Class', found {target.class_path!r}")
    if target.device_kind not in DEVICE_KINDS:
        problems.append(
            f"device_kind: expected one of {sorted(DEVICE_KINDS)}, found {target.device_kind!r}"
        )
    return problems


TRITON_FILES = (
    "backends/triton_backend.py",
    "kernels/triton_mla/*.py",
    "kernels/plan_slice.py",
)

BUILTIN_TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target(
            "cpu",
            "Conformance run of the CPU reference backend.",
            "backends.cpu:CpuReferenceBackend",
            behaviour_files=(
                "backends/cpu.py",
                "kernels/plan_exec.py",
                "kernels/reference.py",
                "kernels/paged.py",
            ),
            default=True,
            release=True,
        ),
        Target(
            "interpret",
            "Conformance run of the Triton kernels under TRITON_INTERPRET=1 on the CPU.",
            "backends.triton_backend:InterpretTritonBackend",
            behaviour_files=(*TRITON_FILES, "kernels/paged.py"),
            environment={"TRITON_INTERPRET": "1"},  # Triton reads it once, when imported
            default=True,
        ),
        Target(
            "cuda",
            "Conformance run of the Triton CUDA backend (a skipped session without a GPU).",
            "backends.triton_backend:CudaTritonBackend",
            device_kind="cuda",
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
        Target(
            "rocm",
            "Conformance run of the AMD AITER backend (a skipped session without ROCm).",
            "backends.rocm:RocmAiterBackend",
            device_kind="rocm",
            behaviour_files=("backends/rocm/*.py", "kernels/paged.py"),
            environment={"AITER_MLA_DECODE_PERSISTENT_MAX_BATCH": "0"},
            default=True,
            release=True,
        ),
        Target(
            "flashinfer",
            "Conformance run of FlashInfer's MLA (a skipped session without it or a GPU).",
            "backends.flashinfer_backend:FlashInferBackend",
            device_kind="cuda",
            behaviour_files=("backends/flashinfer_backend.py",),
        ),
        Target(
            "flashmla",
            "Conformance run of DeepSeek's FlashMLA decode (a skipped session without it or "
            "a Hopper GPU).",
            "backends.flashmla:FlashMLABackend",
            device_kind="cuda",
            behaviour_files=("backends/flashmla/*.py", "conformance/goldens/relayout.py"),
        ),
        Target(
            "vllm",
            "vLLM's own record and MLA builders under the families (docs/engines.md).",
            kind=ENGINE,
            environment={
                "VLLM_TARGET_DEVICE": "cpu",
                "CUDA_VISIBLE_DEVICES": "",
                "TRITON_INTERPRET": "1",
            },
            version="0.33.0",
            min_version="0.28.0",
            below_version="0.35.0",
            details="conformance.engines.target:VLLM_DETAILS",
        ),
        Target(
            "vllm_gpu",
            "vLLM's own MLA decode (TRITON_MLA, FLASHMLA) on a CUDA GPU under the numerics and "
            "masking families (docs/engines.md).",
            kind=ENGINE,
            device_kind="cuda",
            behaviour_files=("conformance/engines/vllm/*.py", "tests/engines/vllm_gpu/*.py"),
            version="0.33.0",
            min_version="0.33.0",
            below_version="0.35.0",
            details="conformance.engines.target:VLLM_GPU_DETAILS",
        ),
        Target(
            "sglang",
            "SGLang's own ForwardBatch, MLA backends and RadixAttention under the families "
            "(docs/engines.md).",
            kind=ENGINE,
            environment={"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"},
            version="0.5.23",
            min_version="0.5.23",
            below_version="0.6.0",
            details="conformance.engines.target:SGLANG_DETAILS",
        ),
    )
}


def builtin_backends() -> dict[str, str]:
    """``{name: "module:Class"}`` of the built-in backends, in declaration order."""
    return {
        name: str(target.class_path)
        for name, target in BUILTIN_TARGETS.items()
        if target.kind == BACKEND
    }


def engine_names() -> tuple[str, ...]:
    """The engine targets, in declaration order."""
    return tuple(name for name, target in BUILTIN_TARGETS.items() if target.kind == ENGINE)


def default_names() -> tuple[str, ...]:
    """Targets a plain ``nox`` runs and a plain sign-off expects."""
    return tuple(name for name, target in BUILTIN_TARGETS.items() if target.default)


def release_names() -> tuple[str, ...]:
    """Targets a release sign-off requires."""
    return tuple(name for name, target in BUILTIN_TARGETS.items() if target.release)


def builtin_target_of_class(module: str, qualname: str) -> Target | None:
    """The built-in target whose class is ``qualname`` defined in ``module`` (or in a module
    below the package its class path names); None for any other class."""
    for target in BUILTIN_TARGETS.values():
        declared_module, _, declared_name = (target.class_path or "").partition(":")
        if declared_name == qualname and (
            module == declared_module or module.startswith(declared_module + ".")
        ):
            return target
    return None


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


def plugin_target(name: str, backend_class: Any, class_path: str) -> Target:
    """A plug-in's declaration, read from its `Backend` class attributes (with defaults)."""
    doc = (getattr(backend_class, "__doc__", None) or "").strip()
    return Target(
        name,
        doc.splitlines()[0] if doc else f"Conformance run of the plug-in backend {name}.",
        class_path,
        device_kind=str(getattr(backend_class, "device_kind", DEFAULT_DEVICE_KIND)),
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


def device_kind_of(
    name: str, *, load_plugins: bool = True, default: str | None = None
) -> str | None:
    """The device kind target ``name`` declares; ``default`` when nobody declares it."""
    target = declared(name, load_plugins=load_plugins)
    return default if target is None else target.device_kind
