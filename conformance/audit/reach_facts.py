"""Per-file facts for telling which builders a stub or construction site reaches.

* `module_globals`: what each module-level name is bound to (its dotted names), so a
  function using ``BUILDER = Enum.MEMBER.get_class().get_builder_cls()`` reaches it.
* `patched_methods`: methods a scope replaces on a class (``monkeypatch.setattr(Cls, "m",
  ...)``, ``setattr(Cls, name, ...)``, ``patch.object(Cls, "m", ...)``, ``Cls.m = ...``,
  also by a function's decorators): their bodies never run there, so their reads are no
  requirement. A computed name is ``"*"`` (any method).
* `configures_speculation`: a scope that sets up speculative decoding (its batches are
  decode-only verification batches).
* `parameters`: a function's parameters (a pytest test reaches the fixtures it names).
* `called_methods`: the attribute names a file calls (``x.unpadded(...)``), to tell which
  transformations of the record are used.
"""

from __future__ import annotations

import ast
from typing import Any

from conformance.audit.astutil import Scope, constant_str, dotted, named_args, sets_attribute
from conformance.audit.sites import EngineSites
from conformance.audit.usage import maximal_refs


def module_globals(module: ast.Module) -> dict[str, list[str]]:
    """Module-level name → the dotted names its value loads (prefixes left out)."""
    found: dict[str, list[str]] = {}
    for stmt in module.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            refs = maximal_refs(list(ast.walk(stmt.value)))
            for target in targets:
                if isinstance(target, ast.Name) and refs:
                    found[target.id] = refs
    return found


def patched_methods(scope: Scope) -> list[list[Any]]:
    """``[[class ref, method or "*", absolute?], ...]`` replaced in `scope`, or by the
    decorators of the function it is (``@patch.object(Cls, "m")``)."""
    found: set[tuple[str, str, bool]] = set()
    decorators = getattr(scope.node, "decorator_list", [])
    for node in [*scope.nodes, *(n for d in decorators for n in ast.walk(d))]:
        if isinstance(node, ast.Call) and sets_attribute(node) and node.args:
            owner = node.args[0]
            text = constant_str(owner)
            if text is not None and text.count(".") >= 2 and len(node.args) >= 2:
                cls, _, method = text.rpartition(".")
                found.add((cls, method, True))
                continue
            ref = dotted(owner)
            if ref is None or len(node.args) < 2:
                continue
            name = constant_str(node.args[1])
            found.add((ref, name or "*", False))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                ref = dotted(target.value) if isinstance(target, ast.Attribute) else None
                if ref is not None and ref[:1].isupper():  # a class, by convention
                    found.add((ref, target.attr, False))  # type: ignore[union-attr]
    return [list(item) for item in sorted(found)]


def called_methods(nodes: list[ast.AST]) -> list[str]:
    """Every attribute name called among `nodes` (``x.name(...)``)."""
    return sorted(
        {
            node.func.attr
            for node in nodes
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        }
    )


def configures_speculation(nodes: list[ast.AST], sites: EngineSites) -> bool:
    """Whether a scope names speculative decoding as the engine does (vLLM:
    ``cfg.speculative_config = ...``, ``SpeculativeConfig(...)``, ``num_speculative_tokens=k``):
    its batches are verification batches, decodes of ``1 + k`` tokens."""
    names = sites.speculative
    for node in nodes:
        if isinstance(node, ast.Attribute) and node.attr in names:
            return True
        if isinstance(node, ast.Name) and node.id in names:
            return True
        if isinstance(node, ast.keyword) and node.arg in names:
            return True
    return False


def parameters(node: ast.AST) -> list[str]:
    """A function's parameter names: a test's fixtures are named by them."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    return [a.arg for a in named_args(node.args)]
