"""Stand-ins for what vLLM imports but its MLA decode does not call, where it is missing.

A GPU machine that gets vLLM's Python files without its wheel (the bundle of
``scripts/vllm_gpu_carry.py``) lacks ``vllm._C_stable_libtorch``, a 93 MB extension that
``vllm/platforms/cuda.py`` imports unconditionally, and may lack a few libraries vLLM's
config modules import at load time (grammar back-ends). `stand_in_missing` puts an empty
module in `sys.modules` for each one that cannot be found, and only then; any attribute read
from a stand-in is a placeholder that raises, naming the module, when it is called. The run's
sidecar lists what was stood in (`stood_in`), so a result never hides it. On a machine with
vLLM installed from its wheel nothing is stood in.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any, NoReturn

STANDINS: dict[str, str] = {
    "vllm._C_stable_libtorch": "vLLM's CUDA kernels (cache writes, quantisation, activations)",
    "vllm._moe_C_stable_libtorch": "vLLM's MoE kernels",
    "xgrammar": "a grammar back-end vLLM's config imports",
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
    module = types.ModuleType(name, f"conformance stand-in: {STANDINS[name]}")
    module.__conformance_standin__ = True  # type: ignore[attr-defined]

    def placeholder(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _placeholder(name, attribute)

    module.__getattr__ = placeholder  # type: ignore[method-assign]
    return module


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def stand_in_missing() -> list[str]:
    """Stand in every module of `STANDINS` that cannot be found; returns all stood in so far."""
    for name in STANDINS:
        if name in sys.modules or _findable(name):
            continue
        sys.modules[name] = _standin_module(name)
        _STOOD_IN.append(name)
    return stood_in()


def stood_in() -> list[str]:
    """The modules this process stood in (empty where vLLM was installed whole)."""
    return list(_STOOD_IN)
