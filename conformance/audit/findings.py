"""Records the static audits produce: findings, named problems, and the rule table.

A `Finding` is one rule broken at one source location; a `Problem` is a file or folder the
audit could not read (a FIFO, a link loop, a syntax error, ...). Text lines read
``path:line: CODE message`` so editors can jump to them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES: tuple[str, ...] = (ERROR, WARNING, INFO)
"""Most severe first."""


@dataclass(frozen=True)
class AuditRule:
    """One audit rule: its code, default severity and a one-line summary."""

    code: str
    severity: str
    summary: str
    """``{record}`` and ``{layer}`` stand for the engine's record and layer classes."""

    def summary_for(self, record: str, layer: str) -> str:
        """The summary for an engine whose record and layer classes are these."""
        return self.summary.format(record=record, layer=layer)


_RULE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("CAM001", ERROR, "construction leaves out a field the definition or a consumer needs"),
    ("CAM002", WARNING, "construction passes a deprecated field"),
    ("CAM003", WARNING, "construction unpacks *args/**kwargs that may hide a needed field"),
    ("CAM004", ERROR, "construction passes an unknown field or too many positionals"),
    ("CAM005", WARNING, "several {record} dataclasses in the tree"),
    ("CAM006", WARNING, "a test passes None on purpose for a field a consumer needs"),
    ("CAM007", WARNING, "the tree defines no {record} dataclass"),
    ("STUB001", ERROR, "layer stub lacks attributes the builder it reaches reads"),
    ("STUB002", WARNING, "layer stub built with **mapping may lack builder attributes"),
    ("STUB003", INFO, "layer stub is not an {layer} subclass"),
    ("STUB004", ERROR, "object.__new__ stand-in lacks attributes its used methods read"),
    ("STUB005", ERROR, "model-runner stub lacks attributes a builder's constructor needs"),
)
RULES: Mapping[str, AuditRule] = {
    code: AuditRule(code, level, text) for code, level, text in _RULE_ROWS
}


@dataclass(frozen=True)
class Finding:
    """One problem at one source location."""

    path: str
    """The file, as displayed (the PATH joined with the path below it)."""
    line: int
    col: int
    code: str
    """One of `RULES`."""
    message: str
    names: tuple[str, ...] = ()
    """The fields or attributes the finding is about."""
    qualname: str = "<module>"
    """The enclosing function or class, as Python's `__qualname__` spells it."""
    severity: str = ""
    """error, warning or info (the rule's default unless configured)."""
    file: str = ""
    """The file on disk (absolute), for baselines and per-file ignores."""
    relpath: str = ""
    """The file below its PATH."""
    span: tuple[int, int] = (0, 0)
    """The source lines a ``# noqa`` comment may sit on (the call, or the storing statement)."""

    def __post_init__(self) -> None:
        if not self.severity:
            object.__setattr__(self, "severity", RULES[self.code].severity)

    def with_severity(self, severity: str) -> Finding:
        """This finding with another severity."""
        return replace(self, severity=severity)

    def to_text(self) -> str:
        """``path:line: CODE message``."""
        return f"{self.path}:{self.line}: {self.code} {self.message}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (docs/audit.md gives the schema)."""
        return {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "names": list(self.names),
            "qualname": self.qualname,
        }


@dataclass(frozen=True)
class Problem:
    """A file or folder the audit could not read; the rest of the tree is still audited."""

    path: str
    line: int
    name: str
    """symlink-loop, link-outside-root, special-filesystem, walk-limit, unreadable,
    unreadable-dir, unlistable-dir, not-a-regular-file,
    too-large, syntax-error, not-utf8, nul-byte, too-deep, dangling-link."""
    message: str

    def to_text(self) -> str:
        """``path:line: PROBLEM name: message``."""
        return f"{self.path}:{self.line}: PROBLEM {self.name}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"path": self.path, "line": self.line, "problem": self.name, "message": self.message}


def join_names(names: Iterable[str]) -> str:
    """``a, b and c`` for messages."""
    items = list(names)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
