"""Backends by name: the built-in ones, plus third-party ones from an entry-point group.

The built-in backends are declared in `conformance.targets`. A third-party package registers
a backend class under the entry-point group ``mla_conformance.backends``::

    [project.entry-points."mla_conformance.backends"]
    mybackend = "my_package.mla:MyBackend"

The class implements `backends.base.Backend` and is constructed without arguments.
"""

from __future__ import annotations

from functools import cache

from backends.base import Backend
from conformance.targets import ENTRY_POINT_GROUP, builtin_backends, load_class, plugin_entry_points

__all__ = [
    "ENTRY_POINT_GROUP",
    "available_backends",
    "backend_names",
    "get_backend",
    "layer_protocols",
]


def backend_names() -> list[str]:
    """Every known backend name: built-ins first, then third-party ones, sorted."""
    return [*builtin_backends(), *sorted(plugin_entry_points())]


@cache
def get_backend(name: str) -> Backend:
    """The backend called `name`; the error lists the known names."""
    target = builtin_backends().get(name) or plugin_entry_points().get(name)
    if target is None:
        raise KeyError(f"unknown backend {name!r}; known backends: {', '.join(backend_names())}")
    backend_class: type[Backend] = load_class(target)
    backend = backend_class()
    if backend.name != name:
        raise ValueError(
            f"backend {target} is registered as {name!r} but names itself {backend.name!r}"
        )
    problems = backend.check_declaration()
    if problems:
        raise ValueError(
            f"backend {name!r} ({target}) declares itself wrongly: {'; '.join(problems)}"
        )
    return backend


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine."""
    return [n for n in backend_names() if _can_run(n)]


def _can_run(name: str) -> bool:
    try:
        return bool(get_backend(name).availability().available)
    except Exception:  # a plug-in that does not load cannot run here
        return False


def layer_protocols() -> dict[str, frozenset[str]]:
    """Each backend's layer protocol (the attributes its builder reads from layers)."""
    return {n: get_backend(n).layer_protocol for n in backend_names()}
