"""The `CommonAttentionMetadata` dataclass as the audited tree defines it, read from source.

Fields are the annotated class-level names in order (``ClassVar`` skipped,
``field(init=False)`` skipped, ``KW_ONLY`` / ``kw_only=True`` honoured, bases not followed);
a field is required when it has no default. A ``_name`` field backing a deprecated ``name``
property (``@deprecated``, a ``DeprecationWarning``/``FutureWarning``, or a docstring saying
deprecated) is a deprecated field.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from conformance.audit.astutil import constant_str, terminal

_WARNINGS = frozenset({"DeprecationWarning", "PendingDeprecationWarning", "FutureWarning"})


@dataclass(frozen=True)
class CamDefinition:
    """What a construction site is checked against."""

    fields: tuple[str, ...]
    positional: tuple[str, ...]
    required: frozenset[str]
    deprecated: dict[str, str]
    """Deprecated field → why (no replacement is suggested: none is sound everywhere)."""
    source: str
    """``path:line`` of the definition."""

    @classmethod
    def from_facts(cls, facts: dict[str, Any], source: str) -> CamDefinition:
        """Build from `definition_facts` output."""
        fields = tuple(facts["fields"])
        deprecated = {
            f"_{name}": f"backing store of the deprecated property {name!r}"
            for name in facts["deprecated_props"]
            if f"_{name}" in fields
        }
        return cls(
            fields=fields,
            positional=tuple(facts["positional"]),
            required=frozenset(facts["required"]),
            deprecated=deprecated,
            source=source,
        )


def _dataclass_flags(node: ast.expr) -> tuple[bool, bool]:
    target = node.func if isinstance(node, ast.Call) else node
    if terminal(target) != "dataclass":
        return False, False
    kw_only = isinstance(node, ast.Call) and any(
        k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in node.keywords
    )
    return True, kw_only


def _mentions(annotation: ast.AST, name: str) -> bool:
    text = constant_str(annotation)
    if text is not None:
        return name in text
    return any(terminal(n) == name for n in ast.walk(annotation) if not isinstance(n, ast.Constant))


def _deprecated_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    names = [terminal(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
    if "property" not in names:
        return False
    if "deprecated" in names or "deprecated" in (ast.get_docstring(node) or "").lower():
        return True
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and terminal(inner.func) == "warn":
            parts = [*inner.args, *(k.value for k in inner.keywords)]
            if any(terminal(p) in _WARNINGS for p in parts if not isinstance(p, ast.Constant)):
                return True
    return False


def definition_facts(node: ast.ClassDef) -> dict[str, Any] | None:
    """The dataclass fields of `node` as a JSON-ready dict; None if not a dataclass."""
    flags = [_dataclass_flags(d) for d in node.decorator_list]
    if not any(is_dc for is_dc, _ in flags):
        return None
    kw_only = any(kw for _, kw in flags)
    fields: list[str] = []
    positional: list[str] = []
    required: list[str] = []
    props: list[str] = []
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _deprecated_property(stmt):
                props.append(stmt.name)
            continue
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        if _mentions(stmt.annotation, "ClassVar"):
            continue
        if terminal(stmt.annotation) == "KW_ONLY":
            kw_only = True
            continue
        has_default = stmt.value is not None
        this_kw_only = kw_only
        if isinstance(stmt.value, ast.Call) and terminal(stmt.value.func) == "field":
            options = {k.arg: k.value for k in stmt.value.keywords if k.arg}
            init = options.get("init")
            if isinstance(init, ast.Constant) and init.value is False:
                continue
            has_default = "default" in options or "default_factory" in options
            flag = options.get("kw_only")
            if isinstance(flag, ast.Constant) and isinstance(flag.value, bool):
                this_kw_only = flag.value
        fields.append(stmt.target.id)
        if not this_kw_only:
            positional.append(stmt.target.id)
        if not has_default:
            required.append(stmt.target.id)
    return {
        "line": node.lineno,
        "fields": fields,
        "positional": positional,
        "required": required,
        "deprecated_props": props,
    }
