"""What this machine knows about backends: their names, and which of them can run here.

`RegistryView` asks ``backends.registry`` inside ``try``: the sign-off must work on a checkout
where the registry cannot be imported (no torch, a broken backend), falling back to the
built-in names and to the backends that ran. `StaticView` answers from fixed data (tests,
offline use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from conformance.applicability import Declaration
from conformance.runs.names import junit_name
from conformance.signoff.model import DEFAULT_BACKENDS
from conformance.targets import BUILTIN_TARGETS, device_of, engine_names, plugin_entry_points


class BackendView(Protocol):
    """The questions the sign-off asks about backends."""

    def registered(self) -> list[str]:
        """Names the registry knows (empty when it cannot tell)."""
        ...

    def plugins(self) -> list[str]:
        """The registered names that installed plug-ins bring (not the suite's own)."""
        ...

    def runnable(self) -> list[str] | None:
        """Backends this machine can run; None when nobody can tell."""
        ...

    def unavailable_reason(self, backend: str) -> str | None:
        """Why ``backend`` cannot run here; None when it can (or nobody can tell)."""
        ...

    def device_kind(self, backend: str) -> str | None:
        """The device kind ``backend`` declares (cpu, cuda, rocm); None when unknown."""
        ...

    def declaration(self, backend: str) -> Declaration | None:
        """What ``backend``'s class declares; None when it cannot be loaded here."""
        ...


class RegistryView:
    """Answers from ``backends.registry``."""

    def registered(self) -> list[str]:
        """The registry's backend names (empty when it cannot be imported)."""
        try:
            from backends.registry import backend_names

            return list(backend_names())
        except Exception:  # the registry is optional here
            return []

    def plugins(self) -> list[str]:
        """Names registered through the entry-point group, not built into the suite."""
        try:
            return sorted(plugin_entry_points())
        except Exception:  # a broken installation's metadata: nobody can tell
            return []

    def runnable(self) -> list[str] | None:
        """``available_backends()``, or None when the registry cannot be imported."""
        try:
            from backends.registry import available_backends

            return list(available_backends())
        except Exception:
            return None

    def unavailable_reason(self, backend: str) -> str | None:
        """The registry's availability reason for ``backend`` (an engine target: how to run it)."""
        if backend in engine_names():
            return engine_not_run(backend)
        try:
            from backends.registry import get_backend
        except Exception as error:
            return f"backends.registry cannot be imported ({type(error).__name__}: {error})"
        try:
            availability = get_backend(backend).availability()
        except KeyError:
            return f"no backend named {backend!r} is registered on this machine"
        except Exception as error:
            return f"availability check raised {type(error).__name__}: {error}"
        if availability.available:
            return None
        return f"backend {backend} unavailable: {availability.reason}"

    def device_kind(self, backend: str) -> str | None:
        """The device kind ``backend`` declares (`conformance.targets.device_of`: the built-in
        table, else an installed plug-in's class)."""
        device = device_of(backend)
        return None if device is None else device.name

    def declaration(self, backend: str) -> Declaration | None:
        """The declaration of the registry's ``backend`` (None when it cannot be loaded)."""
        try:
            from backends.registry import get_backend

            return Declaration.of(get_backend(backend))
        except Exception:
            return None


@dataclass
class StaticView:
    """Fixed answers: ``runnable=None`` plays a machine whose registry cannot be imported."""

    names: Sequence[str] = ()
    runnable_names: Sequence[str] | None = None
    plugin_names: Sequence[str] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)
    kinds: Mapping[str, str] | None = None
    """Device kind by backend; None: what `conformance.targets` declares (no plug-in loaded)."""
    declarations: Mapping[str, Declaration] = field(default_factory=dict)

    def registered(self) -> list[str]:
        """The fixed names."""
        return list(self.names)

    def plugins(self) -> list[str]:
        """The fixed plug-in names."""
        return list(self.plugin_names)

    def runnable(self) -> list[str] | None:
        """The fixed runnable names (or None)."""
        return None if self.runnable_names is None else list(self.runnable_names)

    def unavailable_reason(self, backend: str) -> str | None:
        """The fixed reason for ``backend``, if any."""
        return self.reasons.get(backend)

    def device_kind(self, backend: str) -> str | None:
        """The fixed device kind of ``backend``, else the declared one, if any."""
        if self.kinds is not None:
            return self.kinds.get(backend)
        device = device_of(backend, load_plugins=False)
        return None if device is None else device.name

    def declaration(self, backend: str) -> Declaration | None:
        """The fixed declaration of ``backend``, if any."""
        return self.declarations.get(backend)


def engine_not_run(engine: str) -> str:
    """Why an engine target has no report: it is no backend, its own session writes it."""
    return (
        f"{engine} is an engine target, not a backend: its report "
        f"{junit_name(engine, None)} is written by `nox -s {engine}` (docs/engines.md), "
        "which has not run here"
    )


def known_backends(view: BackendView, expectations_dir: Path) -> set[str]:
    """Declared targets (`conformance.targets`: backends and engines), the registry's names,
    and every backend with an expectation file."""
    names = set(DEFAULT_BACKENDS) | set(BUILTIN_TARGETS) | set(view.registered())
    if expectations_dir.is_dir():
        names.update(path.stem for path in expectations_dir.glob("*.txt"))
    return names
