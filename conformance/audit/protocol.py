"""The layer protocol the stub audit checks against, and its file format.

A layer protocol is a set of dotted attribute paths a metadata builder reads from the layer
objects of a ``static_forward_context`` (``prefill_backend.clone`` is a call on the
``prefill_backend`` attribute). By default it is the union of every registered backend's
declaration (`backends.registry.layer_protocols()`); where that cannot be imported it is
`conformance.stubs.protocol.MLA_BUILDER_LAYER_PROTOCOL`. ``--protocol FILE`` replaces it with a
plain-text file::

    # comments run from '#' to the end of the line
    prefill_backend            # attributes before any section belong to [default]
    [rocm]                     # optional sections, one per backend
    prefill_backend.clone
    q_lora_rank

Each non-blank line is a section header ``[name]`` (letters, digits, ``_ . -``) or one
dotted attribute path of Python identifiers. The audit uses the union of all sections.
"""

from __future__ import annotations

import keyword
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import ConformanceError

DEFAULT_SECTION = "default"
_SECTION = re.compile(r"^\[(?P<name>[A-Za-z0-9_.\-]+)\]$")


class ProtocolFileError(ConformanceError, ValueError):
    """A protocol file that cannot be read or has a bad line; names the file and line."""

    def __init__(self, path: str, line: int, message: str) -> None:
        self.path = path
        self.line = line
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclass(frozen=True)
class LayerProtocol:
    """The attributes every layer stub must have, with where they came from."""

    by_backend: Mapping[str, frozenset[str]]
    """Backend (or file section) → dotted attribute paths."""
    source: str
    """``backends.registry``, ``conformance.stubs.protocol`` (fallback) or the protocol file."""
    note: str = ""
    """Why the fallback was used, when it was."""
    attributes: frozenset[str] = field(init=False)
    """The union of every backend's paths."""

    def __post_init__(self) -> None:
        union = frozenset().union(*self.by_backend.values()) if self.by_backend else frozenset()
        object.__setattr__(self, "attributes", union)

    def requirement_tree(self) -> dict[str, dict]:
        """The paths as nested dicts: ``{"prefill_backend": {"clone": {}}, ...}``."""
        tree: dict[str, dict] = {}
        for path in sorted(self.attributes):
            node = tree
            for part in path.split("."):
                node = node.setdefault(part, {})
        return tree

    def to_json(self) -> dict[str, object]:
        """Provenance for the JSON report."""
        return {
            "source": self.source,
            "note": self.note,
            "attributes": sorted(self.attributes),
            "by_backend": {k: sorted(v) for k, v in sorted(self.by_backend.items())},
        }


def is_attribute_path(text: str) -> bool:
    """Whether `text` is a dotted path of Python identifiers (no keywords)."""
    parts = text.split(".")
    return all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)


def _validated(by_backend: Mapping[str, Iterable[str]], source: str) -> dict[str, frozenset[str]]:
    result: dict[str, frozenset[str]] = {}
    for name, paths in by_backend.items():
        paths = frozenset(paths)
        bad = sorted(p for p in paths if not isinstance(p, str) or not is_attribute_path(p))
        if bad:
            raise ValueError(f"{source}: backend {name!r} declares bad attribute paths {bad}")
        result[str(name)] = paths
    return result


def fallback_protocol(note: str = "") -> LayerProtocol:
    """`conformance.stubs.protocol.MLA_BUILDER_LAYER_PROTOCOL`, as a protocol."""
    from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

    return LayerProtocol(
        {"mla": MLA_BUILDER_LAYER_PROTOCOL},
        source="conformance.stubs.protocol.MLA_BUILDER_LAYER_PROTOCOL",
        note=note,
    )


def default_protocol() -> LayerProtocol:
    """The union of the registered backends' layer protocols, else the fallback.

    Falls back (with `LayerProtocol.note` saying why) when `backends.registry` cannot be
    imported, has no `layer_protocols`, raises, or declares nothing.
    """
    try:
        from backends.registry import layer_protocols
    except ImportError as exc:
        return fallback_protocol(f"backends.registry not importable: {exc}")
    try:
        declared = _validated(layer_protocols(), "backends.registry.layer_protocols()")
    except Exception as exc:  # a broken third-party backend must not stop the audit
        return fallback_protocol(
            f"backends.registry.layer_protocols() failed: {type(exc).__name__}: {exc}"
        )
    if not any(declared.values()):
        return fallback_protocol("backends.registry.layer_protocols() declared no attributes")
    return LayerProtocol(declared, source="backends.registry.layer_protocols()")


def parse_protocol_text(text: str, source: str) -> LayerProtocol:
    """Parse the protocol file format (module docstring); errors name `source` and line."""
    sections: dict[str, set[str]] = {}
    header_lines: dict[str, int] = {}
    current = DEFAULT_SECTION
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            match = _SECTION.match(line)
            if match is None:
                raise ProtocolFileError(
                    source,
                    number,
                    f"bad section header {line!r}: expected [name] with letters, digits, "
                    "'_', '.' or '-'",
                )
            current = match.group("name")
            if current in header_lines:
                raise ProtocolFileError(
                    source,
                    number,
                    f"section [{current}] appears twice (first at line {header_lines[current]})",
                )
            header_lines[current] = number
            sections.setdefault(current, set())
            continue
        if not is_attribute_path(line):
            raise ProtocolFileError(
                source,
                number,
                f"bad attribute path {line!r}: expected one dotted path of Python "
                "identifiers per line, such as prefill_backend.clone",
            )
        sections.setdefault(current, set()).add(line)
    for name, number in header_lines.items():
        if not sections[name]:
            raise ProtocolFileError(source, number, f"section [{name}] lists no attributes")
    if not any(sections.values()):
        raise ProtocolFileError(source, 0, "defines no attributes")
    return LayerProtocol({k: frozenset(v) for k, v in sections.items()}, source=source)


def load_protocol_file(path: str | os.PathLike[str]) -> LayerProtocol:
    """Read a protocol file; `ProtocolFileError` names the file (and line) on any problem."""
    display = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProtocolFileError(display, 0, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProtocolFileError(display, 0, f"cannot read: {exc}") from None
    return parse_protocol_text(text, display)
