"""Where a record goes, for judging its transformations by their receivers (per-file facts).

* `record_value_flows`: each call of a method on a record (``cam.unpadded(n)``, the
  receiver named ``*attn_metadata*``, ``cam``, ``*_cam`` or ``cm``) with the local it is
  bound to and the callees it is handed to directly; and every call handing such a local
  to a callee (``self.propose_draft_token_ids(..., spec_decode_common_attn_metadata)``),
  so a transformed record is followed by its name through the file (returned, unpacked,
  passed on).
* `attribute_types`: what a class's ``self.attr = Cls(...)`` assignments construct, so a
  hand-off to ``self.drafter.propose(cam)`` reaches the drafter classes' ``propose``.
"""

from __future__ import annotations

import ast
from typing import Any

from conformance.audit.astutil import dotted, self_assignments

_RECORD_NAMES = frozenset({"cam", "cm", "common_metadata"})


def is_record_name(name: str) -> bool:
    """Whether a local's name says it holds the record (``*attn_metadata*``, ``cam``,
    ``*_cam``, ``cm``)."""
    return "attn_metadata" in name or name in _RECORD_NAMES or name.endswith("_cam")


def _callee(node: ast.Call) -> str | None:
    callee = dotted(node.func)
    if callee is None or callee.startswith("cls."):
        return None
    parts = callee.split(".")
    if parts[0] == "self" and len(parts) > 3:
        return None
    return callee


def record_value_flows(
    scope_q: str, nodes: list[ast.AST]
) -> tuple[list[list[Any]], list[list[Any]]]:
    """(``[scope, method, bound local or None, [direct callees]]`` for each method called
    on a record, ``[scope, local, callee]`` for each hand-off of a record local)."""
    parents: dict[int, ast.AST] = {}
    for node in nodes:
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    calls, passes = [], []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        callee = _callee(node)
        for value in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(value, ast.Name) and is_record_name(value.id) and callee:
                passes.append([scope_q, value.id, callee])
        func = node.func
        if not isinstance(func, ast.Attribute):
            continue
        owner = dotted(func.value)
        if owner is None or not is_record_name(owner.rsplit(".", 1)[-1]):
            continue
        parent = parents.get(id(node))
        bound = None
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            target = parent.targets[0]
            bound = target.id if isinstance(target, ast.Name) else None
        direct = []
        if isinstance(parent, ast.Call) and (callee_of := _callee(parent)):
            direct.append(callee_of)
        calls.append([scope_q, func.attr, bound, direct])
    return calls, passes


def attribute_types(node: ast.ClassDef) -> dict[str, list[str]]:
    """``attr`` → the dotted callees of ``self.attr = Callee(...)`` in the class's methods
    (an upper-case last name: a class, by convention)."""
    found: dict[str, set[str]] = {}
    for stmt in node.body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for attr, value in self_assignments(stmt):
            callee = dotted(value.func) if isinstance(value, ast.Call) else None
            if callee is not None and callee.rsplit(".", 1)[-1][:1].isupper():
                found.setdefault(attr, set()).add(callee)
    return {attr: sorted(refs) for attr, refs in sorted(found.items())}
