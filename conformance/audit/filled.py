"""What a construction site says beyond its arguments, for an engine that fills its record
after building it (SGLang's ``ForwardBatch``; `sites.EngineSites.filled_later`).

* `later_fields`: the fields assigned on the local the construction is bound to, later in
  the same scope (``batch = ForwardBatch(...)`` then ``batch.extend_seq_lens = ...`` or
  ``setattr(batch, "extend_seq_lens", ...)``), under a branch or not: they count as passed.
* `mode_member`: the mode passed literally (``forward_mode=ForwardMode.DECODE``: an
  upper-case member of a class), which says which kind of batch the site builds.
"""

from __future__ import annotations

import ast

from conformance.audit.astutil import Scope, constant_str, dotted, terminal


def _bound_name(scope: Scope, call: ast.Call) -> str | None:
    """The local `call`'s value is bound to (``batch = Record(...)``), else None."""
    for node in scope.nodes:
        if isinstance(node, ast.Assign) and node.value is call and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is call:
            target = node.target
        else:
            continue
        return target.id if isinstance(target, ast.Name) else None
    return None


def later_fields(scope: Scope, call: ast.Call) -> list[str]:
    """Fields assigned on the local `call` is bound to, after it, in `scope`."""
    name = _bound_name(scope, call)
    if name is None:
        return []
    after = call.end_lineno or call.lineno
    found: set[str] = set()
    for node in scope.nodes:
        if getattr(node, "lineno", 0) <= after:
            continue
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and terminal(node.func) == "setattr":
            args = node.args
            if len(args) >= 2 and isinstance(args[0], ast.Name) and args[0].id == name:
                field = constant_str(args[1])
                found |= {field} if field else set()
            continue
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == name
            ):
                found.add(target.attr)
    return sorted(found)


def mode_member(call: ast.Call, field: str) -> str | None:
    """``ForwardMode.DECODE`` when `call` passes ``field=ForwardMode.DECODE`` (an upper-case
    member of a class); None for any other value (a variable: any kind of batch)."""
    for keyword in call.keywords:
        value = keyword.value
        if keyword.arg == field and isinstance(value, ast.Attribute) and value.attr.isupper():
            return dotted(value)
    return None
