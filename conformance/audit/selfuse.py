"""What a method does with ``self``: the attributes it sets, reads and calls on every path
(the stand-in audit's facts)."""

from __future__ import annotations

import ast
from typing import Any

from conformance.audit.astutil import dotted


def self_usage(
    nodes: list[ast.AST], self_name: str | None, body: list[ast.stmt] | None = None
) -> dict[str, Any]:
    """What a method (its scope's `nodes`, its `body`) sets on, reads from and calls on its
    first parameter on every path, and the dotted names it returns."""
    sets: set[str] = set()
    reads: set[str] = set()
    calls: set[str] = set()
    supers: set[str] = set()
    returns: list[str] = []
    dynamic = False
    called: set[int] = set()
    branches = conditional_ids(nodes) | after_early_exit(body or [])
    for node in nodes:
        if id(node) in branches and not isinstance(node, ast.Attribute | ast.Return):
            continue
        if isinstance(node, ast.Call):
            called.add(id(node.func))
            func_node = node.func
            if isinstance(func_node, ast.Name) and func_node.id == "setattr" and node.args:
                if isinstance(node.args[0], ast.Name) and node.args[0].id == self_name:
                    key = node.args[1] if len(node.args) > 1 else None
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        sets.add(key.value)
                    else:
                        dynamic = True
            elif isinstance(func_node, ast.Attribute):
                owner = func_node.value
                if (
                    isinstance(owner, ast.Call)
                    and isinstance(owner.func, ast.Name)
                    and owner.func.id == "super"
                ):
                    supers.add(func_node.attr)
                elif isinstance(owner, ast.Attribute) and owner.attr == "__dict__":
                    dynamic = dynamic or dotted(owner.value) == self_name
        elif isinstance(node, ast.Attribute):
            value = node.value
            if isinstance(value, ast.Name) and value.id == self_name:
                if isinstance(node.ctx, ast.Store):
                    sets.add(node.attr)
                elif id(node) in branches:
                    continue  # read on one path only: not a requirement of every call
                elif id(node) in called:
                    calls.add(node.attr)
                else:
                    reads.add(node.attr)
        elif isinstance(node, ast.Return) and node.value is not None:
            ref = dotted(node.value)
            if ref:
                returns.append(ref)
    return {
        "sets": sorted(sets),
        "reads": sorted(reads - sets),
        "calls": sorted(calls),
        "super": sorted(supers),
        "dynamic": dynamic,
        "returns": returns,
    }


def conditional_ids(nodes: list[ast.AST]) -> set[int]:
    """Ids of the nodes that run on some paths only: branch bodies of ``if``, loops,
    ``try`` handlers, conditional expressions, ``and``/``or`` right operands, ``match``,
    and what a comprehension computes per element (none when the collection is empty)."""
    found: set[int] = set()
    for node in nodes:
        parts: list = []
        if isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While):
            parts = [*node.body, *node.orelse]
        elif isinstance(node, ast.IfExp):
            parts = [node.body, node.orelse]
        elif isinstance(node, ast.Try):
            parts = [*node.handlers, *node.orelse]
        elif isinstance(node, ast.BoolOp):
            parts = node.values[1:]
        elif isinstance(node, ast.Match):
            parts = node.cases
        elif isinstance(node, ast.comprehension):
            parts = node.ifs
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            parts = [node.elt, *node.generators[1:]]
        elif isinstance(node, ast.DictComp):
            parts = [node.key, node.value, *node.generators[1:]]
        for part in parts:
            if id(part) not in found:
                found.update(id(n) for n in ast.walk(part))
    return found


def after_early_exit(body: list[ast.stmt]) -> set[int]:
    """Ids of the nodes after the first ``if`` that may ``return`` or ``raise``: they run
    on some paths only."""
    for index, stmt in enumerate(body):
        if isinstance(stmt, ast.If) and any(
            isinstance(n, ast.Return | ast.Raise) for part in stmt.body for n in ast.walk(part)
        ):
            return {id(n) for later in body[index + 1 :] for n in ast.walk(later)}
    return set()
