"""Facts about the machine and software a run used: versions, device, git commit.

Everything here is best effort and never raises: a fact that cannot be found is ``None``.
Nothing here imports torch; a device name is read only from a torch that is already imported,
so a pytest-xdist controller does not initialise a GPU its workers are about to pin.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conformance.runs.environment import GIT_COMMIT_VARIABLE
from conformance.runs.record import MachineFacts
from conformance.targets import device_of

# module name -> distribution names to ask importlib.metadata when the module is not imported
TRACKED_PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "triton": ("triton", "pytorch-triton", "pytorch-triton-rocm"),
    "aiter": ("aiter", "amd-aiter"),
}


def package_versions() -> dict[str, str | None]:
    """Version of torch, triton and aiter: of the imported module, else of the installed one."""
    versions: dict[str, str | None] = {}
    for module_name, distributions in TRACKED_PACKAGES.items():
        module = sys.modules.get(module_name)
        version = getattr(module, "__version__", None) if module is not None else None
        for distribution in distributions if version is None else ():
            try:
                version = importlib.metadata.version(distribution)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        versions[module_name] = None if version is None else str(version)
    return versions


def torch_build() -> dict[str, str | None]:
    """CUDA / HIP versions torch was built with, when torch is already imported."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "version", None)
    return {
        "torch_cuda": getattr(version, "cuda", None),
        "torch_hip": getattr(version, "hip", None),
    }


def _run_git(arguments: list[str], cwd: Path) -> str | None:
    try:
        completed = subprocess.run(
            ["git", *arguments],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if completed.returncode != 0:
        return None
    return completed.stdout.strip()


def git_facts(cwd: Path) -> dict[str, Any]:
    """``git_commit`` and ``git_dirty`` of the checkout at ``cwd``.

    ``MLA_CONFORMANCE_GIT_COMMIT`` wins over ``git rev-parse HEAD``: whoever copied the tree
    to a machine names the commit it holds, and git metadata travelling with such a copy may
    be older than its files (then ``git_dirty`` is unknown).
    """
    named = os.environ.get(GIT_COMMIT_VARIABLE)
    if named:
        return {"git_commit": named, "git_dirty": None}
    commit = _run_git(["rev-parse", "HEAD"], cwd)
    status = _run_git(["status", "--porcelain", "--untracked-files=no"], cwd)
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def cpu_name() -> str:
    """The CPU model (from /proc/cpuinfo where there is one), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def gpu_name() -> str | None:
    """Name (and gfx arch on ROCm) of the current GPU, if torch is imported and sees one."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        index = torch.cuda.current_device()
        name = str(torch.cuda.get_device_name(index))
        if not getattr(torch.version, "hip", None):
            return name
        arch = getattr(torch.cuda.get_device_properties(index), "gcnArchName", None)
        return f"{name} ({arch})" if arch else name
    except Exception:  # a fact we cannot read is simply absent
        return None


def gpu_names() -> list[str]:
    """The names of every GPU torch sees (``torch.cuda``, also on ROCm), if torch is imported.

    Under GPU pinning a worker sees its own GPU only. Empty on a machine without one.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    try:
        if not torch.cuda.is_available():
            return []
        return [
            str(torch.cuda.get_device_name(index)) for index in range(torch.cuda.device_count())
        ]
    except Exception:  # a fact we cannot read is simply absent
        return []


def run_devices(worker_devices: Iterable[str], device: str | None) -> list[str]:
    """The devices a run used: its xdist workers' devices, else the one it ran on."""
    named = sorted({str(name) for name in worker_devices if name})
    return named or ([device] if device else [])


def device_name(backend: str) -> str | None:
    """The device a backend runs on: the GPU for a backend of a GPU device kind, the CPU
    model otherwise. A plug-in's declaration is read only once the registry is loaded (its
    module is never imported here)."""
    loaded = "backends.registry" in sys.modules
    device = device_of(backend, load_plugins=loaded)
    if device is not None and device.is_gpu:
        return gpu_name()
    return cpu_name()


def machine_facts(backend: str, cwd: Path) -> MachineFacts:
    """The machine and software of a run of ``backend`` from the checkout at ``cwd``."""
    build, git = torch_build(), git_facts(cwd)
    return MachineFacts(
        device=device_name(backend),
        python=platform.python_version(),
        platform=platform.platform(),
        hostname=platform.node(),
        versions=package_versions(),
        torch_cuda=build["torch_cuda"],
        torch_hip=build["torch_hip"],
        git_commit=git["git_commit"],
        git_dirty=git["git_dirty"],
    )
