"""A recording proxy for layer objects: which attributes does a metadata builder read?

`record_layer(target)` wraps a layer object (or nothing, `NOTHING`) in a proxy that logs
every attribute read as a dotted path: ``layer.prefill_backend.clone()`` logs the reads
``prefill_backend`` and ``prefill_backend.clone`` and a call of ``prefill_backend.clone``.
Put the proxy into a `static_forward_context`, run a builder's ``__init__`` and ``build()``
and `log_of(proxy).reads` is the builder's real layer read set (vLLM #51255 → #52139).

Modes:

- **strict** (default): a read the target cannot satisfy raises `StubIncompleteError`
  naming the attribute path, the stub and where the stub was built.
- **lenient**: the read is logged as missing and a plain `AttributeError` is raised, so
  the proxied object behaves exactly like the unwrapped one (``getattr(x, a, default)``
  and ``hasattr`` keep working) and `ReadLog.missing` lists what was absent.

Values of leaf types (numbers, strings, tensors, dtypes, devices, enums, containers,
classes) are returned as they are, so arithmetic and torch calls on them work; reads below
a leaf are not recorded. Every other value comes back wrapped, so nested reads are recorded.
A call on a wrapped value is recorded and returns the real result, unwrapped: what a call
returns is not a layer attribute. The proxy reports its target's class (``isinstance``
works as on the target), so type-filtered layer lookups treat it as they treat the target.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import os
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.errors import StubIncompleteError

STUB_SITE_ATTRIBUTE = "_stub_built_at"
"""Instance attribute where stub factories store the `BuildSite` of a stub."""

LEAF_TYPES: tuple[type, ...] = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    enum.Enum,
    tuple,
    list,
    dict,
    set,
    frozenset,
    type,
    torch.Tensor,
    torch.dtype,
    torch.device,
)
"""Values returned unwrapped; reads below them are not recorded."""


class _Nothing:
    """The target of a proxy around nothing: every read is missing."""

    def __repr__(self) -> str:
        return "NOTHING"


NOTHING: Any = _Nothing()
"""Pass as the target to record against no object at all."""


# ---------------------------------------------------------------------------- build sites


@dataclass(frozen=True)
class BuildSite:
    """Where a stub was built: a source file, a line and the enclosing function."""

    file: str
    line: int
    function: str = ""
    """The enclosing function's name; empty when unknown (a tracemalloc record)."""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where} (in {self.function})" if self.function else where


def _display_file(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive on Windows
        return filename
    return filename if relative.startswith("..") else relative


def caller_site(depth: int = 1) -> BuildSite:
    """The `BuildSite` of the caller `depth` frames above the function calling this one."""
    frame = inspect.currentframe()
    try:
        for _ in range(depth + 1):
            if frame is None or frame.f_back is None:
                break
            frame = frame.f_back
        if frame is None:
            return BuildSite("<unknown>", 0, "<unknown>")
        code = frame.f_code
        return BuildSite(_display_file(code.co_filename), frame.f_lineno, code.co_name)
    finally:
        del frame


def site_of(obj: Any) -> BuildSite | None:
    """Where `obj` was built, when known: a stub factory's record, else tracemalloc's."""
    try:
        site = object.__getattribute__(obj, "__dict__").get(STUB_SITE_ATTRIBUTE)
    except AttributeError:
        site = None
    if isinstance(site, BuildSite):
        return site
    if tracemalloc.is_tracing():
        traceback = tracemalloc.get_object_traceback(obj)
        if traceback is not None and len(traceback):
            frame = traceback[0]
            return BuildSite(_display_file(frame.filename), frame.lineno)
    return None


def unknown_site(recorded_from: BuildSite) -> str:
    """The ``built_at`` text of a stub whose origin is unknown: where recording started."""
    return f"an unknown place; recorded from {recorded_from}"


def describe_stub(obj: Any, name: str | None = None) -> str:
    """``SimpleNamespace 'placeholder'``: the stub's type and, if given, its name."""
    kind = "<nothing>" if obj is NOTHING else type(obj).__name__
    return f"{kind} {name!r}" if name else kind


def stub_incomplete(
    path: str,
    *,
    stub: str,
    built_at: BuildSite | str | None,
    detail: str = "",
    problem: str | None = None,
) -> StubIncompleteError:
    """A `StubIncompleteError` naming `path`, the stub and where it was built.

    The message reads ``layer stub <stub> <problem> (stub built at <site>); <detail>``,
    `problem` defaulting to ``has no attribute '<path>'``. The error carries ``path``
    (the dotted attribute path), ``stub`` and ``built_at``; ``name`` (as on every
    `AttributeError`) is the path's last part.
    """
    where = built_at if built_at is not None else "an unknown place (not made by a stub factory)"
    what = problem if problem is not None else f"has no attribute {path!r}"
    message = f"layer stub {stub} {what} (stub built at {where})"
    if detail:
        message += f"; {detail}"
    error = StubIncompleteError(message, name=path.rsplit(".", 1)[-1])
    error.path = path  # type: ignore[attr-defined]
    error.stub = stub  # type: ignore[attr-defined]
    error.built_at = built_at  # type: ignore[attr-defined]
    return error


# ---------------------------------------------------------------------------- the log


READ = "read"
CALL = "call"
MISSING = "missing"
WRITE = "write"


@dataclass(frozen=True)
class Access:
    """One recorded access: a dotted path, its kind and the phase it happened in."""

    path: str
    kind: str
    """`READ`, `CALL`, `MISSING` (a read the target could not satisfy) or `WRITE`."""
    phase: str = ""


@dataclass
class ReadLog:
    """What one recording proxy (and every value read through it) saw."""

    stub: str
    built_at: BuildSite | str | None
    strict: bool
    events: list[Access] = field(default_factory=list)
    current_phase: str = ""

    def add(self, path: str, kind: str) -> None:
        """Append one access in the current phase."""
        self.events.append(Access(path, kind, self.current_phase))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Tag the accesses made inside the ``with`` block with `name` (``init``, ``build``)."""
        previous, self.current_phase = self.current_phase, name
        try:
            yield
        finally:
            self.current_phase = previous

    def _paths(self, *kinds: str, phase: str | None = None) -> frozenset[str]:
        return frozenset(
            e.path for e in self.events if e.kind in kinds and (phase is None or e.phase == phase)
        )

    def reads(self, phase: str | None = None) -> frozenset[str]:
        """Every attribute path read, present or missing (optionally of one phase)."""
        return self._paths(READ, MISSING, phase=phase)

    @property
    def calls(self) -> frozenset[str]:
        """Paths that were called (``prefill_backend.clone``)."""
        return self._paths(CALL)

    @property
    def missing(self) -> frozenset[str]:
        """Paths read that the target did not have."""
        return self._paths(MISSING)

    @property
    def writes(self) -> frozenset[str]:
        """Paths assigned through the proxy."""
        return self._paths(WRITE)

    def clear(self) -> None:
        """Forget every event."""
        self.events.clear()


# ---------------------------------------------------------------------------- the proxy


class RecordingLayer:
    """Proxy that logs attribute reads, nested reads and calls into a shared `ReadLog`.

    Build one with `record_layer`; read its log with `log_of`. The proxy has no public
    attributes of its own, so every name a builder reads reaches the target.
    """

    __slots__ = ("_rec_log", "_rec_path", "_rec_target")

    def __init__(self, target: Any, log: ReadLog, path: str = "") -> None:
        object.__setattr__(self, "_rec_target", target)
        object.__setattr__(self, "_rec_log", log)
        object.__setattr__(self, "_rec_path", path)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        """The target's class, so ``isinstance`` answers as for the target."""
        target = object.__getattribute__(self, "_rec_target")
        return RecordingLayer if target is NOTHING else type(target)

    def __getattr__(self, name: str) -> Any:
        __tracebackhide__ = True
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # copy/pickle probes: not a layer read
        log: ReadLog = object.__getattribute__(self, "_rec_log")
        parent = object.__getattribute__(self, "_rec_path")
        target = object.__getattribute__(self, "_rec_target")
        path = f"{parent}.{name}" if parent else name
        try:
            if target is NOTHING:
                raise AttributeError(name)
            value = getattr(target, name)
        except StubIncompleteError:
            log.add(path, MISSING)
            raise
        except AttributeError as exc:
            log.add(path, MISSING)
            if log.strict:
                raise stub_incomplete(
                    path,
                    stub=log.stub,
                    built_at=log.built_at,
                    detail="a builder read it (strict recording)",
                ) from exc
            raise
        log.add(path, READ)
        return _wrap(value, log, path)

    def __setattr__(self, name: str, value: Any) -> None:
        log: ReadLog = object.__getattribute__(self, "_rec_log")
        parent = object.__getattribute__(self, "_rec_path")
        target = object.__getattribute__(self, "_rec_target")
        log.add(f"{parent}.{name}" if parent else name, WRITE)
        if target is NOTHING:
            raise AttributeError(f"cannot set {name!r} on a recording proxy around nothing")
        setattr(target, name, value)

    def __repr__(self) -> str:
        target = object.__getattribute__(self, "_rec_target")
        path = object.__getattribute__(self, "_rec_path")
        where = f" at {path!r}" if path else ""
        return f"<recording proxy{where} of {target!r}>"

    def __dir__(self) -> list[str]:
        target = object.__getattribute__(self, "_rec_target")
        return [] if target is NOTHING else dir(target)


class CallableRecordingLayer(RecordingLayer):
    """A recording proxy around a callable (a bound method such as ``clone``)."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        log: ReadLog = object.__getattribute__(self, "_rec_log")
        log.add(object.__getattribute__(self, "_rec_path"), CALL)
        return object.__getattribute__(self, "_rec_target")(*args, **kwargs)


def _wrap(value: Any, log: ReadLog, path: str) -> Any:
    if isinstance(value, LEAF_TYPES):
        return value
    cls = CallableRecordingLayer if callable(value) else RecordingLayer
    return cls(value, log, path)


def record_layer(
    target: Any = NOTHING,
    *,
    name: str | None = None,
    strict: bool = True,
    built_at: BuildSite | str | None = None,
) -> RecordingLayer:
    """Wrap `target` (or nothing) in a recording proxy.

    `name` is how errors call the stub (the layer name in its context, say). `built_at`
    defaults to where the target was built when that is known (`site_of`), else to a
    text naming the caller of this function (``an unknown place; recorded from ...``).
    """
    site = built_at if built_at is not None else site_of(target) if target is not NOTHING else None
    if site is None:
        site = unknown_site(caller_site())
    log = ReadLog(stub=describe_stub(target, name), built_at=site, strict=strict)
    cls = CallableRecordingLayer if target is not NOTHING and callable(target) else RecordingLayer
    return cls(target, log)


def log_of(proxy: RecordingLayer) -> ReadLog:
    """The `ReadLog` a recording proxy (or a proxy read through it) writes to."""
    if not issubclass(type(proxy), RecordingLayer):
        raise TypeError(f"log_of: expected a recording proxy, found {type(proxy).__name__}")
    return object.__getattribute__(proxy, "_rec_log")


def unwrap(value: Any) -> Any:
    """The object behind a recording proxy (`NOTHING` for a proxy around nothing)."""
    if issubclass(type(value), RecordingLayer):
        return object.__getattribute__(value, "_rec_target")
    return value
