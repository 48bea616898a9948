"""Model-runner stubs of one scope, as JSON-ready facts: the values a scope hands to a
builder's constructor, for an engine whose builders are constructed over a model runner
(SGLang: ``ATTENTION_BACKENDS[name](runner)``, ``TritonAttnBackend(runner)``;
`sites.EngineSites.runner`).

A call is a candidate when its callee is a subscript of one of the engine's registries (by
its last name) or a name ending with the engine's `builder_suffix`; the audit resolves it
before judging (`runner_stubs`). Its stub is the first positional argument, else the
``model_runner=`` keyword, read as `shapes` reads a layer stub (``SimpleNamespace(...)``, a
dict, ``Cls(...)``, ``object.__new__(Cls)``, or a local bound to one, with the attributes
set on it later). For ``Cls(...)`` the keywords of the constructing call are kept too
(``model_config=config``), so what ``Cls.__init__`` stores from them can be judged.
"""

from __future__ import annotations

import ast
from typing import Any

from conformance.audit.astutil import Scope, constant_str, dotted, named_args, self_assignments
from conformance.audit.shapes import ScopeValues
from conformance.audit.sites import EngineSites


def _callee(node: ast.Call, sites: EngineSites) -> tuple[str, str, str | None] | None:
    """(``registry`` or ``class``, the dotted name, the registry key if constant)."""
    func = node.func
    registries = {r.rsplit(".", 1)[-1] for r in sites.registries}
    if isinstance(func, ast.Subscript):
        ref = dotted(func.value)
        if ref is not None and ref.rsplit(".", 1)[-1] in registries:
            return "registry", ref, constant_str(func.slice)
        return None
    ref = dotted(func)
    suffix = sites.builder_suffix
    if ref is not None and suffix and ref.rsplit(".", 1)[-1].endswith(suffix):
        return "class", ref, None
    return None


def _argument(node: ast.Call, keyword: str) -> ast.expr | None:
    if node.args:
        return None if isinstance(node.args[0], ast.Starred) else node.args[0]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def _constructing_call(values: ScopeValues, expr: ast.expr, line: int) -> ast.Call | None:
    """The ``Cls(...)`` call `expr` is, or the local `expr` names is bound to."""
    if isinstance(expr, ast.Name):
        bound = values.binding(expr.id, line)
        return bound[1] if bound is not None and isinstance(bound[1], ast.Call) else None
    return expr if isinstance(expr, ast.Call) else None


def read_value(
    values: ScopeValues, expr: ast.expr, line: int, depth: int = 0, call: ast.Call | None = None
) -> dict | None:
    """The shape of `expr` (`ScopeValues.read`; as an argument of `call`:
    `ScopeValues.read_argument`), with ``kwargs``: the shapes of the keywords of the call
    constructing an instance (two levels deep)."""
    shape = values.read(expr, line) if call is None else values.read_argument(expr, call)
    if shape is None or shape["kind"] != "instance" or depth > 1:
        return shape
    call = _constructing_call(values, expr, line)
    if call is not None:
        inner = {
            k.arg: read_value(values, k.value, line, depth + 1) for k in call.keywords if k.arg
        }
        shape["kwargs"] = {name: value for name, value in inner.items() if value is not None}
    return shape


def runner_stubs_in_scope(
    scope: Scope, ns_names: set[str], sites: EngineSites
) -> list[dict[str, Any]]:
    """The model-runner stubs `scope` hands to builder constructors (module docstring)."""
    calls = [
        (node, found)
        for node in scope.nodes
        if isinstance(node, ast.Call)
        for found in [_callee(node, sites)]
        if found is not None
    ]
    if not calls:
        return []
    values = ScopeValues(scope, ns_names)
    stubs = []
    for node, (via, ref, key) in calls:
        argument = _argument(node, sites.runner)
        if argument is None:
            continue
        shape = read_value(values, argument, node.lineno, call=node)
        if shape is None:
            continue
        stubs.append(
            {
                "via": via,
                "ref": ref,
                "key": key,
                "q": scope.qualname,
                "line": node.lineno,
                "col": node.col_offset,
                "end": node.end_lineno or node.lineno,
                "shape": shape,
            }
        )
    return stubs


def init_params(node: ast.ClassDef) -> dict[str, str]:
    """``attr`` → the ``__init__`` parameter it is stored from (``self.attr = param``)."""
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            args = named_args(stmt.args)
            params = {a.arg for a in args[1:]}
            return {
                attr: value.id
                for attr, value in self_assignments(stmt)
                if isinstance(value, ast.Name) and value.id in params
            }
    return {}
