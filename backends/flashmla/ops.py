"""Where FlashMLA's ops come from: found once, loaded once, described for the run's sidecar.

FlashMLA (DeepSeek's MLA decode kernel for Hopper) is reached in this order:

1. the ``flash_mla`` package of FlashMLA's own build (importing it registers
   ``torch.ops._flashmla_C``);
2. the two extensions a vLLM CUDA wheel bundles, ``vllm/_flashmla_C.abi3.so`` (dense decode)
   and ``vllm/_flashmla_extension_C.abi3.so`` (the SM90 dense e4m3 path), loaded with
   ``torch.ops.load_library`` from the installed vLLM without importing vLLM's package;
3. a folder named by ``MLA_FLASHMLA_DIR`` holding those two files (``scripts/flashmla_carry.py``
   extracts them from a vLLM wheel, with a ``provenance.json`` naming the wheel).

Both extensions are built on torch's stable ABI. The e4m3 path exists only where the second
extension does. `find_ops` never raises: what it cannot find or load is its one-line reason.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import torch

DIR_ENV = "MLA_FLASHMLA_DIR"
DENSE_LIB = "_flashmla_C.abi3.so"
FP8_LIB = "_flashmla_extension_C.abi3.so"
PROVENANCE_FILE = "provenance.json"


@dataclass(frozen=True)
class FlashMLAOps:
    """FlashMLA's op namespaces and where they came from."""

    dense: Any
    """``torch.ops._flashmla_C``: ``dense_decode_fwd``."""
    fp8: Any | None
    """``torch.ops._flashmla_extension_C``: ``get_mla_decoding_metadata_dense_fp8`` and
    ``fwd_kvcache_mla_fp8``; None without the extension."""
    source: str
    """In words: which of the three places, and its version."""
    files: dict[str, str] = field(default_factory=dict)
    """sha256 of each loaded library file, by file name."""

    def provenance(self) -> dict[str, str]:
        """The facts a run records: the source, and each file's sha256."""
        facts = {"flashmla_source": self.source, "flashmla_fp8": str(self.fp8 is not None)}
        facts.update({f"sha256:{name}": digest for name, digest in sorted(self.files.items())})
        return facts


@dataclass(frozen=True)
class NotFound:
    """Why FlashMLA's ops are not here, in one line."""

    reason: str


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _load_libraries(folder: Path, source: str) -> FlashMLAOps | NotFound:
    """Load the two extensions of `folder` (the e4m3 one where present)."""
    dense = folder / DENSE_LIB
    if not dense.is_file():
        return NotFound(f"{source}: no {DENSE_LIB} in {folder.name or folder}")
    files = {}
    for path in (dense, folder / FP8_LIB):
        if not path.is_file():
            continue
        try:
            torch.ops.load_library(str(path))
        except Exception as error:  # another torch ABI, a wrong arch: the reason, one line
            return NotFound(f"{source}: {path.name} does not load: {_first_line(error)}")
        files[path.name] = _sha256(path)
    fp8 = torch.ops._flashmla_extension_C if FP8_LIB in files else None
    return FlashMLAOps(torch.ops._flashmla_C, fp8, source, files)


def _from_flash_mla() -> FlashMLAOps | NotFound | None:
    if importlib.util.find_spec("flash_mla") is None:
        return None
    try:
        module = importlib.import_module("flash_mla")
    except Exception as error:
        return NotFound(f"flash_mla does not import: {_first_line(error)}")
    version = getattr(module, "__version__", "unknown")
    files = {p.name: _sha256(p) for p in Path(module.__file__).parent.glob("cuda*.so")}
    fp8 = torch.ops._flashmla_extension_C if _has_namespace("_flashmla_extension_C") else None
    return FlashMLAOps(torch.ops._flashmla_C, fp8, f"flash_mla {version} (FlashMLA's build)", files)


def _has_namespace(name: str) -> bool:
    try:
        return bool(dir(getattr(torch.ops, name)))
    except (AttributeError, RuntimeError):
        return False


def _from_vllm() -> FlashMLAOps | NotFound | None:
    spec = importlib.util.find_spec("vllm")  # finds the package; imports nothing of it
    locations = list(spec.submodule_search_locations or ()) if spec else []
    folder = next((Path(p) for p in locations if (Path(p) / DENSE_LIB).is_file()), None)
    if folder is None:
        return None
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return _load_libraries(folder, f"vLLM {version}'s bundled extensions")


def _from_folder() -> FlashMLAOps | NotFound | None:
    value = os.environ.get(DIR_ENV)
    if not value:
        return None
    folder = Path(value)
    if not folder.is_dir():
        return NotFound(f"{DIR_ENV}={value}: not a folder")
    source = f"{DIR_ENV} folder"
    try:
        described = json.loads((folder / PROVENANCE_FILE).read_text(encoding="utf-8"))
        source += f" (from {described['wheel']})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return _load_libraries(folder, source)


SEARCH_ORDER = (_from_flash_mla, _from_vllm, _from_folder)


@cache
def find_ops() -> FlashMLAOps | NotFound:
    """FlashMLA's ops from the first place that has them (see the module docstring)."""
    for search in SEARCH_ORDER:
        found = search()
        if found is not None:
            return found
    return NotFound(
        f"FlashMLA not found: no flash_mla package, no vLLM with vllm/{DENSE_LIB}, "
        f"and {DIR_ENV} is unset"
    )
