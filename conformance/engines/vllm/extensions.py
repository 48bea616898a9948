"""Stand-ins for what vLLM imports but its MLA decode does not call, where it is missing.

A GPU machine that gets vLLM's Python files without its wheel (the bundle of
``scripts/vllm_gpu_carry.py``) lacks ``vllm._C_stable_libtorch``, a 93 MB extension that
``vllm/platforms/cuda.py`` imports unconditionally, FlashAttention-2's extension (308 MB),
without which ``vllm.vllm_flash_attn`` refuses to import on CUDA (the MLA decode never calls
it: prefill does), and may lack llguidance, a grammar back-end vLLM's config imports.

    python -m conformance.engines.vllm.extensions SITE

writes a stand-in module file into the folder SITE (where the bundle's ``vllm/`` was
unpacked) for each module of `STANDINS` that cannot be found there, and only then: files, so
that the subprocesses vLLM starts (its model registry's inspection) import them too. Any
attribute read from a stand-in is a placeholder that raises, naming the module, when it is
called or instantiated. `stood_in` lists what was stood in, for the run's sidecar, so a
result never hides it. On a machine with vLLM installed from its wheel nothing is stood in.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

STANDINS: dict[str, str] = {
    "vllm._C_stable_libtorch": "vLLM's CUDA kernels (cache writes, quantisation, activations)",
    "vllm._moe_C_stable_libtorch": "vLLM's MoE kernels",
    "vllm.vllm_flash_attn._vllm_fa2_C": "FlashAttention-2, vLLM's prefill kernel (308 MB)",
    "llguidance": "a grammar back-end vLLM's config imports",
}
"""Module → what it is; each stood in only where it cannot be found."""

MARKER = "__conformance_standin__ = True"
SOURCE = '''"""Conformance stand-in: {what}."""

import importlib.abc
import importlib.util
import sys

{marker}


class StoodInError(RuntimeError):
    """Something called lives in a module that was stood in."""


def _placeholders(module):
    """The ``__getattr__`` of stand-in `module`: a placeholder that refuses to be called."""

    def placeholder(attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)

        def refuse(*args, **kwargs):
            raise StoodInError(
                f"{{module}}.{{attribute}} was called, but {{module}} is a stand-in here "
                "({what}): install vLLM from its wheel to run this path"
            )

        return type(attribute, (), {{"__new__": refuse, "__call__": refuse, "__module__": module}})

    return placeholder


__getattr__ = _placeholders(__name__)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every submodule of this stand-in is one too."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__getattr__ = _placeholders(module.__name__)


if __name__.count(".") == 0:
    sys.meta_path.append(_Submodules())
'''


def module_file(name: str) -> Path | None:
    """The file (or package folder) of module `name`, found without importing any package it
    is in (a package whose ``__init__`` needs the missing extension would fail half-way)."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not rest:
        return None if spec is None else Path(spec.origin or "")
    *folders, leaf = rest
    for root in spec.submodule_search_locations or ():
        folder = Path(root, *folders)
        for found in (folder / leaf, *folder.glob(f"{leaf}.*py"), *folder.glob(f"{leaf}.*so")):
            if found.exists():
                return found
    return None


def stand_in_path(name: str, site: Path) -> Path:
    """Where the stand-in of `name` goes under `site` (a top-level name: a package)."""
    parts = name.split(".")
    if len(parts) == 1:
        return site / name / "__init__.py"
    return site.joinpath(*parts[:-1], f"{parts[-1]}.py")


def write_standins(site: Path) -> list[str]:
    """Write a stand-in into `site` (on this interpreter's path) for each module of
    `STANDINS` that cannot be found."""
    written = []
    for name, what in STANDINS.items():
        if module_file(name) is not None:
            continue
        path = stand_in_path(name, site)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SOURCE.format(what=what, marker=MARKER), encoding="utf-8")
        written.append(name)
    return written


def stood_in() -> list[str]:
    """The modules of `STANDINS` that this interpreter would import as a stand-in."""
    found = []
    for name in STANDINS:
        path = module_file(name)
        if path is not None and path.is_dir():
            path = path / "__init__.py"
        if path is not None and path.suffix == ".py" and MARKER in path.read_text("utf-8"):
            found.append(name)
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(
            "usage: python -m conformance.engines.vllm.extensions SITE (a folder)",
            file=sys.stderr,
        )
        return 2
    written = write_standins(Path(argv[0]))
    print(f"stood in: {', '.join(written) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
