"""Records the static audits produce, and their text and JSON renderings.

A `Finding` is one problem at one source location; a `ParseFailure` is a file the audit
could not read or parse. Text lines read ``path:line: CODE message`` (the compiler
convention, so editors can jump to them); JSON carries every field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Finding kinds. Every kind but WARNING makes the audit exit 1.
MISSING = "missing"
"""A field or attribute a consumer needs is left out."""
DEPRECATED = "deprecated"
"""A deprecated field is passed."""
INVALID = "invalid"
"""A call that would raise at run time (unknown field, too many positional arguments)."""
UNVERIFIABLE = "unverifiable"
"""`**kwargs`-style unpacking hides whether a needed name is given."""
WARNING = "warning"
"""Worth a look, but not a failure: printed, never changes the exit status."""

KINDS: tuple[str, ...] = (MISSING, DEPRECATED, INVALID, UNVERIFIABLE, WARNING)

# Finding codes: one per check, stable (they appear in suppression comments).
CODES: Mapping[str, str] = {
    "CAM001": "CommonAttentionMetadata construction leaves out a needed field",
    "CAM002": "CommonAttentionMetadata construction passes a deprecated field",
    "CAM003": "CommonAttentionMetadata construction cannot be checked (argument unpacking)",
    "CAM004": "CommonAttentionMetadata construction passes an unknown field or too many "
    "positional arguments",
    "CAM005": "several CommonAttentionMetadata dataclasses in the audited tree",
    "STUB001": "layer stub stored in a static_forward_context lacks protocol attributes",
    "STUB002": "layer stub cannot be checked (argument unpacking)",
    "STUB003": "layer stub is not an AttentionLayerBase subclass (type-filtered lookups skip it)",
    "STUB004": "object.__new__ stand-in lacks protocol attributes",
}


@dataclass(frozen=True)
class Finding:
    """One problem at one source location."""

    path: str
    """The file, as displayed (see `tree.SourceFile.display`)."""
    line: int
    col: int
    kind: str
    """One of `KINDS`."""
    code: str
    """One of `CODES`."""
    message: str
    names: tuple[str, ...] = ()
    """The fields or attributes the finding is about (missing, deprecated, unknown)."""
    qualname: str = "<module>"
    """The enclosing function or class, as Python's `__qualname__` spells it."""

    @property
    def fails(self) -> bool:
        """Whether this finding makes the audit exit 1 (everything but warnings)."""
        return self.kind != WARNING

    def to_text(self) -> str:
        """``path:line: CODE message``."""
        return f"{self.path}:{self.line}: {self.code} {self.message}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "kind": self.kind,
            "code": self.code,
            "message": self.message,
            "names": list(self.names),
            "qualname": self.qualname,
        }


@dataclass(frozen=True)
class ParseFailure:
    """A file the audit could not read or parse; the rest of the tree is still audited."""

    path: str
    line: int
    col: int
    message: str

    def to_text(self) -> str:
        """``path:line: PARSE message``."""
        return f"{self.path}:{self.line}: PARSE cannot parse: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {"path": self.path, "line": self.line, "col": self.col, "message": self.message}


@dataclass
class AuditReport:
    """Everything one audit run found, plus what it audited against."""

    findings: list[Finding] = field(default_factory=list)
    errors: list[ParseFailure] = field(default_factory=list)
    files_audited: int = 0
    audits: tuple[str, ...] = ()
    context: dict[str, Any] = field(default_factory=dict)
    """Provenance: where the CAM definition and the layer protocol came from."""

    def sorted_findings(self) -> list[Finding]:
        """Findings ordered by path, line, column and code."""
        return sorted(self.findings, key=lambda f: (f.path, f.line, f.col, f.code))

    @property
    def exit_code(self) -> int:
        """2 on any parse failure, else 1 on any failing finding, else 0."""
        if self.errors:
            return 2
        if any(f.fails for f in self.findings):
            return 1
        return 0

    def summary(self) -> str:
        """One line: counts of findings, warnings, parse failures and files."""
        failing = sum(f.fails for f in self.findings)
        warnings = len(self.findings) - failing
        parts = [
            f"{failing} finding{'s' if failing != 1 else ''}",
            f"{warnings} warning{'s' if warnings != 1 else ''}",
            f"{len(self.errors)} unparsable file{'s' if len(self.errors) != 1 else ''}",
            f"{self.files_audited} file{'s' if self.files_audited != 1 else ''} audited",
        ]
        return "audit: " + ", ".join(parts) + f" (exit {self.exit_code})"

    def to_text(self) -> str:
        """Parse failures first, then findings, one per line."""
        lines = [e.to_text() for e in sorted(self.errors, key=lambda e: (e.path, e.line))]
        lines += [f.to_text() for f in self.sorted_findings()]
        return "\n".join(lines)

    def to_json(self) -> str:
        """The whole report as a JSON document (see docs/audit.md for the schema)."""
        document = {
            "version": 1,
            "exit_code": self.exit_code,
            "audits": list(self.audits),
            "files_audited": self.files_audited,
            "findings": [f.to_json() for f in self.sorted_findings()],
            "errors": [e.to_json() for e in sorted(self.errors, key=lambda e: (e.path, e.line))],
            **self.context,
        }
        return json.dumps(document, indent=2, sort_keys=False)


def join_names(names: Iterable[str]) -> str:
    """``a, b and c`` for messages."""
    items = list(names)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
