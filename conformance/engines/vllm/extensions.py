"""Stand-ins for what vLLM imports but its MLA decode does not call, where it is missing.

A GPU machine that gets vLLM's Python files without its wheel (the bundle of
``scripts/vllm_gpu_carry.py``) lacks ``vllm._C_stable_libtorch``, a 93 MB extension that
``vllm/platforms/cuda.py`` imports unconditionally, FlashAttention-2's extension (308 MB),
without which ``vllm.vllm_flash_attn`` refuses to import on CUDA (the MLA decode never calls
it: prefill does), and may lack llguidance, a grammar back-end vLLM's config imports.
`stand_in_missing` puts an empty module in `sys.modules` for each one that cannot be found,
and only then; any attribute read from a stand-in is a placeholder that raises, naming the
module, when it is called. The run's sidecar lists what was stood in (`stood_in`), so a
result never hides it. On a machine with vLLM installed from its wheel nothing is stood in.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, NoReturn

STANDINS: dict[str, str] = {
    "vllm._C_stable_libtorch": "vLLM's CUDA kernels (cache writes, quantisation, activations)",
    "vllm._moe_C_stable_libtorch": "vLLM's MoE kernels",
    "vllm.vllm_flash_attn._vllm_fa2_C": "FlashAttention-2, vLLM's prefill kernel (308 MB)",
    "llguidance": "a grammar back-end vLLM's config imports",
}
"""Module → what it is; each stood in only where it cannot be found."""

_STOOD_IN: list[str] = []


class StoodInError(RuntimeError):
    """Something the MLA decode path called lives in a module that was stood in."""


def _placeholder(module: str, attribute: str) -> Any:
    """A class standing for ``module.attribute``: calling or instantiating it raises."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise StoodInError(
            f"{module}.{attribute} was called, but {module} is a stand-in here "
            f"({STANDINS.get(module, 'missing')}): install vLLM from its wheel to run this path"
        )

    return type(attribute, (), {"__new__": refuse, "__call__": refuse, "__module__": module})


def _standin_module(name: str) -> types.ModuleType:
    """An empty package: its attributes are placeholders, its submodules stand-ins too."""
    root = next(r for r in STANDINS if name == r or name.startswith(r + "."))
    module = types.ModuleType(name, f"conformance stand-in: {STANDINS[root]}")
    module.__conformance_standin__ = True  # type: ignore[attr-defined]
    module.__path__ = []  # type: ignore[attr-defined]

    def placeholder(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _placeholder(name, attribute)

    module.__getattr__ = placeholder  # type: ignore[method-assign]
    return module


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stands in ``a.b`` for every stood-in ``a`` (``from xgrammar.structural_tag import``)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if any(fullname.startswith(f"{name}.") for name in _STOOD_IN):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return _standin_module(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module is empty."""


def _findable(name: str) -> bool:
    """Whether `name` has a module file, found without importing any package it is in (a
    package whose ``__init__`` needs the missing extension would fail half-imported)."""
    top, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or not rest:
        return spec is not None
    *folders, leaf = rest.split(".")
    for location in spec.submodule_search_locations or ():
        folder = Path(location, *folders)
        if (
            (folder / leaf).is_dir()
            or any(folder.glob(f"{leaf}.*py"))
            or any(folder.glob(f"{leaf}.*so"))
        ):
            return True
    return False


def stand_in_missing() -> list[str]:
    """Stand in every module of `STANDINS` that cannot be found; returns all stood in so far."""
    for name in STANDINS:
        if name in sys.modules or _findable(name):
            continue
        sys.modules[name] = _standin_module(name)
        _STOOD_IN.append(name)
    if _STOOD_IN and not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
        sys.meta_path.append(_SubmoduleFinder())
    return stood_in()


def stood_in() -> list[str]:
    """The modules this process stood in (empty where vLLM was installed whole)."""
    return list(_STOOD_IN)
