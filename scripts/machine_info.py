"""The versions and the device of a GPU machine as JSON, for the scripts/gpu_*.sh runs.

    python3 scripts/machine_info.py OUTFILE BACKEND SCRIPT

Writes OUTFILE and prints the same JSON: the device and every GPU torch sees (``gpus``).
BACKEND ``cuda`` adds Triton's version, the device memory and what ``nvidia-smi`` says;
``flashinfer`` adds FlashInfer's version, ``flashmla`` where FlashMLA's ops came from (with
each file's sha256), ``vllm_gpu`` vLLM's version. SCRIPT names the script that ran, with the
commit of MLA_CONFORMANCE_GIT_COMMIT ("unknown" without it).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from typing import Any

import torch

BACKENDS = ("cuda", "flashinfer", "flashmla", "vllm_gpu")


def _triton_version() -> str:
    try:
        import triton
    except ImportError as exc:
        return f"not importable: {exc}"
    return triton.__version__


def _flashinfer_version() -> str:
    try:
        import flashinfer

        return getattr(flashinfer, "__version__", "unknown")
    except Exception as exc:  # reported, the run that follows says the backend is unavailable
        return f"not importable: {type(exc).__name__}: {exc}"


def _vllm_version() -> str:
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception as exc:  # reported; the run that follows says why vLLM is missing
        return f"not found: {type(exc).__name__}: {exc}"


def _flashmla_source() -> dict[str, str]:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from backends.flashmla.ops import FlashMLAOps, find_ops

    found = find_ops()
    return found.provenance() if isinstance(found, FlashMLAOps) else {"not found": found.reason}


def _nvidia_smi() -> str:
    query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    try:
        smi = subprocess.run(query, capture_output=True, text=True)
    except OSError as exc:
        return f"not runnable: {exc}"
    return smi.stdout.strip() or smi.stderr.strip()


def machine_info(backend: str, script: str) -> dict[str, Any]:
    """The JSON-ready description of this machine for a run of ``script`` on ``backend``."""
    commit = os.environ.get("MLA_CONFORMANCE_GIT_COMMIT") or "unknown"
    info: dict[str, Any] = {
        "backend": backend,
        "source": f"{script} at commit {commit}",
        "git_commit": commit,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
    }
    if backend == "cuda":
        info["triton"] = _triton_version()
    elif backend == "flashinfer":
        info["flashinfer"] = _flashinfer_version()
    elif backend == "vllm_gpu":
        info["vllm"] = _vllm_version()
    else:
        info["flashmla"] = _flashmla_source()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            device=props.name,
            gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
            sm_count=props.multi_processor_count,
            capability=f"{props.major}.{props.minor}",
        )
        if backend == "cuda":
            info["memory_gib"] = round(props.total_memory / 2**30, 1)
    if backend == "cuda":
        info["nvidia_smi"] = _nvidia_smi()
    return info


def main(argv: list[str]) -> int:
    """Write and print the machine's JSON; 2 on bad arguments."""
    if len(argv) != 3 or argv[1] not in BACKENDS:
        print(
            f"usage: machine_info.py OUTFILE BACKEND SCRIPT (BACKEND one of {', '.join(BACKENDS)})",
            file=sys.stderr,
        )
        return 2
    out, backend, script = argv
    info = machine_info(backend, script)
    with open(out, "w") as handle:
        json.dump(info, handle, indent=2)
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
