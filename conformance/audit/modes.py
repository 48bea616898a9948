"""Reads that depend on the batch's mode (SGLang's ``forward_batch.forward_mode``;
`sites.EngineSites.mode_field`): not requirements of every batch.

An engine whose record says which kind of batch it is branches on it (``if
forward_batch.forward_mode.is_target_verify(): forward_batch.spec_info...``): what such a
branch reads is needed for that mode only, and the static audit cannot tell which modes a
construction site builds (measured facts can: they name the batch kinds). So a read under a
branch, conditional expression or later ``and``/``or`` operand whose test mentions the mode
(the field, or a local assigned from it) is not a requirement; nor is one after a guard on
the mode that leaves the function (``if not forward_batch.forward_mode.is_target_verify():
return``).
"""

from __future__ import annotations

import ast


def _mentions_mode(node: ast.AST, names: set[str], field: str) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr == field)
        or (isinstance(n, ast.Name) and n.id in names)
        for n in ast.walk(node)
    )


def mode_names(func: ast.AST, field: str) -> set[str]:
    """`field` and the locals assigned (directly or through others) from the mode."""
    names = {field}
    assigns = [n for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AnnAssign))]
    for _ in range(4):
        before = len(names)
        for node in assigns:
            if node.value is not None and _mentions_mode(node.value, names, field):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
        if len(names) == before:
            break
    return names


def _leaves(body: list[ast.stmt]) -> bool:
    """Whether a block always leaves the function (its last statement returns or raises)."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def mode_branch_ids(func: ast.AST, field: str) -> set[int]:
    """Ids of the nodes of `func` that run only on some modes of the batch."""
    names = mode_names(func, field)
    found: set[int] = set()
    for node in ast.walk(func):
        parts: list[ast.AST] = []
        for block in ("body", "orelse", "finalbody"):
            statements = getattr(node, block, None)
            if not isinstance(statements, list):
                continue
            for index, stmt in enumerate(statements):
                if (
                    isinstance(stmt, ast.If)
                    and _mentions_mode(stmt.test, names, field)
                    and (_leaves(stmt.body) or _leaves(stmt.orelse))
                ):
                    parts += statements[index + 1 :]
                    break
        if isinstance(node, (ast.If, ast.While)) and _mentions_mode(node.test, names, field):
            parts = [*node.body, *node.orelse]
        elif isinstance(node, ast.IfExp) and _mentions_mode(node.test, names, field):
            parts = [node.body, node.orelse]
        elif isinstance(node, ast.BoolOp):
            for index, value in enumerate(node.values[1:], start=1):
                if any(_mentions_mode(v, names, field) for v in node.values[:index]):
                    parts.append(value)
        for part in parts:
            found.update(id(n) for n in ast.walk(part))
    return found
