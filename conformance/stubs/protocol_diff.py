"""Layer-protocol diffs: what a real builder reads from its layer versus what it declares.

- `record_builder_reads`: run a builder against a recording layer, return its `ReadLog`;
- `compare_layer_protocol` / `assert_layer_protocol_matches`: diff that read set with the
  backend's declared ``layer_protocol`` (`ProtocolDiff`, rendered ``+``/``-`` per path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.stubs.recorder import (
    ReadLog,
    caller_site,
    log_of,
    record_layer,
    site_of,
    unknown_site,
)

STUB_LAYER_NAME = "model.layers.0.self_attn.attn"
"""The layer name `record_builder_reads` registers its recording layer under."""


def record_builder_reads(
    make_builder: Callable[[dict[str, Any]], Any],
    layer: Any,
    batches: Sequence[Any],
    *,
    layer_name: str = STUB_LAYER_NAME,
    strict: bool = True,
) -> ReadLog:
    """Run a builder against a recording `layer` and return what it read.

    `make_builder(context)` constructs the builder over ``{layer_name: proxy}`` (phase
    ``init``); each of `batches` then goes through ``build()`` (phase ``build``).
    """
    site = site_of(layer) or unknown_site(caller_site())
    proxy = record_layer(layer, name=layer_name, strict=strict, built_at=site)
    log = log_of(proxy)
    with log.phase("init"):
        builder = make_builder({layer_name: proxy})
    with log.phase("build"):
        for batch in batches:
            builder.build(batch)
    return log


@dataclass(frozen=True)
class ProtocolDiff:
    """Declared layer protocol versus the recorded read set."""

    declared: frozenset[str]
    recorded: frozenset[str]

    @property
    def undeclared(self) -> frozenset[str]:
        """Read by the builder but not declared: stubs may lack them."""
        return self.recorded - self.declared

    @property
    def unread(self) -> frozenset[str]:
        """Declared but never read: the declaration is stale."""
        return self.declared - self.recorded

    @property
    def ok(self) -> bool:
        """Whether the two sets are equal."""
        return not self.undeclared and not self.unread

    def render(self, *, backend: str, log: ReadLog | None = None) -> str:
        """A readable diff: ``+ path`` undeclared reads, ``- path`` declared, never read."""
        phases: dict[str, str] = {}
        if log is not None:
            for event in log.events:
                phases.setdefault(event.path, event.phase)
        lines = [f"backend {backend!r}: the builder's layer reads differ from its layer_protocol"]
        for path in sorted(self.undeclared):
            during = f" during {phases[path]}" if phases.get(path) else ""
            lines.append(
                f"  + {path:<24} read{during}, not declared "
                "(declare it in layer_protocol; every layer stub then needs it)"
            )
        for path in sorted(self.unread):
            lines.append(f"  - {path:<24} declared, never read (drop it from layer_protocol)")
        lines.append(f"  declared: {sorted(self.declared)}")
        lines.append(f"  recorded: {sorted(self.recorded)}")
        return "\n".join(lines)


def compare_layer_protocol(*, declared: Iterable[str], recorded: Iterable[str]) -> ProtocolDiff:
    """The diff between a declared layer protocol and a recorded read set."""
    return ProtocolDiff(frozenset(declared), frozenset(recorded))


def assert_layer_protocol_matches(*, declared: Iterable[str], log: ReadLog, backend: str) -> None:
    """Fail with a readable diff unless `log`'s read set equals `declared`."""
    __tracebackhide__ = True
    diff = compare_layer_protocol(declared=declared, recorded=log.reads())
    if not diff.ok:
        raise AssertionError(diff.render(backend=backend, log=log))


__all__ = [
    "STUB_LAYER_NAME",
    "ProtocolDiff",
    "assert_layer_protocol_matches",
    "compare_layer_protocol",
    "record_builder_reads",
]
