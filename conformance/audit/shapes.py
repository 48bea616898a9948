"""Stub shapes of one scope: values stored into the engine's layer context (vLLM's
``static_forward_context``), and ``object.__new__`` stand-ins, as JSON-ready facts.

A stored value is read when it is ``SimpleNamespace(...)`` (keywords), a dict literal or
``dict(...)`` (string keys), ``Cls(...)`` (kind ``instance``: the index decides whether
``Cls`` is an ad-hoc class of the tree), ``object.__new__(Cls)`` (kind ``standin``), or a
local name bound to one of those; attributes set on that name later in the scope count.
Stores: ``ctx[k] = X``, ``ctx = {k: X}``, ``ctx.update(...)``, ``ctx.setdefault(k, X)``, a
``static_forward_context={k: X}`` keyword, and the same through a local alias of ``ctx``.
An engine whose layers are handed to the builder at forward time (SGLang:
``backend.forward_decode(q, k, v, layer, forward_batch)``, `EngineSites.layer_calls`) has a
stub in each such call's layer argument, with the method it is handed to (``method``).
`ScopeValues.read` reads one value the same way (SGLang's model-runner stubs).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from conformance.audit.astutil import (
    Scope,
    constant_str,
    dotted,
    own_nodes,
    positional_args,
    sets_attribute,
    terminal,
)
from conformance.audit.selfuse import self_usage
from conformance.audit.sites import EngineSites

_DEPTH = 4


class ScopeValues:
    """Local bindings and attribute stores of one scope."""

    def __init__(self, scope: Scope, ns_names: set[str], context: str = "") -> None:
        self.context = context
        """The layer context's name (``static_forward_context``); "": the engine has none."""
        self.ns_names = ns_names | {"SimpleNamespace"}
        self.bindings: dict[str, list[tuple[int, ast.expr]]] = {}
        self.sets: dict[str, list[tuple[int, str, ast.expr | None]]] = {}
        self.ctx: set[str] = set()
        self.dynamic: set[str] = set()  # names given attributes under computed names
        for node in scope.nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._note(target, node.value, node.lineno)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._note(node.target, node.value, node.lineno)
            elif isinstance(node, ast.Call) and sets_attribute(node):
                args = node.args
                if len(args) >= 2 and isinstance(args[0], ast.Name) and constant_str(args[1]):
                    value = args[2] if len(args) > 2 else None
                    self.sets.setdefault(args[0].id, []).append(
                        (node.lineno, constant_str(args[1]), value)  # type: ignore[arg-type]
                    )
                elif len(args) >= 2 and isinstance(args[0], ast.Name):
                    self.dynamic.add(args[0].id)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "update"
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "__dict__"
                and isinstance(node.func.value.value, ast.Name)
            ):
                self.dynamic.add(node.func.value.value.id)
        for name, values in self.bindings.items():
            if any(self.names_context(v) for _, v in values):
                self.ctx.add(name)
        for node in scope.nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                if any(self.names_context(t) for t in node.targets):
                    self.ctx.add(node.value.id)

    def _note(self, target: ast.AST, value: ast.expr | None, line: int) -> None:
        if isinstance(target, ast.Name) and value is not None:
            self.bindings.setdefault(target.id, []).append((line, value))
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            self.sets.setdefault(target.value.id, []).append((line, target.attr, value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._note(element, None, line)

    def binding(self, name: str, line: int) -> tuple[int, ast.expr] | None:
        values = self.bindings.get(name)
        if not values:
            return None
        before = [b for b in values if b[0] <= line]
        return before[-1] if before else values[0]

    def names_context(self, node: ast.AST) -> bool:
        """Whether `node` is a name ending with the layer context's."""
        text = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        return bool(self.context) and text is not None and text.endswith(self.context)

    def is_context(self, node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id in self.ctx) or self.names_context(node)

    def read_argument(self, expr: ast.AST, call: ast.Call) -> dict[str, Any] | None:
        """The shape of `expr`, an argument of `call`; None for a name the call's own result
        is bound to (``backend = Backend(backend)``: the name holds what came before)."""
        if isinstance(expr, ast.Name):
            bound = self.binding(expr.id, call.lineno)
            if bound is not None and bound[1] is call:
                return None
        return self.read(expr, call.lineno)

    def read(self, expr: ast.AST, line: int, depth: int = 0) -> dict[str, Any] | None:
        """The shape `expr` evaluates to, or None when the audit cannot read it."""
        if depth > _DEPTH:
            return None
        if isinstance(expr, ast.Dict):
            return self._mapping(
                "dict literal", expr, list(zip(expr.keys, expr.values, strict=True)), [], depth
            )
        if isinstance(expr, ast.Name):
            bound = self.binding(expr.id, line)
            if bound is None:
                return None
            shape = self.read(bound[1], bound[0], depth + 1)
            if shape is not None:
                for set_line, attr, value in self.sets.get(expr.id, []):
                    if set_line >= bound[0]:
                        shape["attrs"].append(attr)
                        inner = self.read(value, set_line, depth + 1) if value is not None else None
                        if inner is not None:
                            shape["values"][attr] = inner
                        else:
                            shape["values"].pop(attr, None)
                shape["var"] = expr.id
                shape["dynamic"] = expr.id in self.dynamic
            return shape
        if not isinstance(expr, ast.Call):
            return None
        callee = dotted(expr.func)
        entries = [(ast.Constant(k.arg), k.value) for k in expr.keywords if k.arg]
        spreads = [k.value for k in expr.keywords if k.arg is None] + list(expr.args)
        if callee in self.ns_names or (callee or "").endswith("types.SimpleNamespace"):
            return self._mapping("SimpleNamespace(...)", expr, entries, spreads, depth)
        if callee == "dict":
            return self._mapping("dict(...)", expr, entries, spreads, depth)
        cls = standin_class(expr)
        if cls is not None:
            return _shape("standin", f"object.__new__({cls.rsplit('.', 1)[-1]})", expr, cls)
        if callee is not None:
            return _shape("instance", f"{callee.rsplit('.', 1)[-1]}(...)", expr, callee)
        return None

    def _mapping(
        self, label: str, node: ast.AST, entries: list, spreads: list, depth: int
    ) -> dict[str, Any]:
        shape = _shape("mapping", label, node, None)
        for key, value in entries:
            if key is None:
                spreads.append(value)
                continue
            text = constant_str(key)
            if text is None:
                shape["unpacked"] = True
                continue
            shape["attrs"].append(text)
            inner = self.read(value, getattr(value, "lineno", 0), depth + 1)
            if inner is not None:
                shape["values"][text] = inner
        for spread in spreads:
            if isinstance(spread, ast.Dict):
                inner = self._mapping(
                    label, node, list(zip(spread.keys, spread.values, strict=True)), [], depth
                )
                shape["attrs"] += inner["attrs"]
                shape["values"].update(inner["values"])
                shape["unpacked"] = shape["unpacked"] or inner["unpacked"]
            else:
                shape["unpacked"] = True
        return shape


def _shape(kind: str, label: str, node: ast.AST, cls: str | None) -> dict[str, Any]:
    return {
        "kind": kind,
        "label": label,
        "cls": cls,
        "attrs": [],
        "values": {},
        "unpacked": False,
        "dynamic": False,
        "first": True,
        "line": getattr(node, "lineno", 0),
        "col": getattr(node, "col_offset", 0),
        "end": getattr(node, "end_lineno", 0) or getattr(node, "lineno", 0),
    }


def standin_class(call: ast.Call) -> str | None:
    """``Cls`` (dotted) for ``object.__new__(Cls)`` or ``Cls.__new__(Cls)``, else None."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "__new__" and len(call.args) == 1):
        return None
    owner, cls = dotted(func.value), dotted(call.args[0])
    if owner is None or cls is None or cls == "cls":
        return None
    return cls if owner in ("object", cls) else None


def _stored(node: ast.AST, facts: ScopeValues) -> Iterator[tuple[ast.expr, bool]]:
    """(value, whether it may be the first layer of the context) for each stored value."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and facts.is_context(target.value):
                yield node.value, True
            elif facts.names_context(target):
                yield from _values(node.value, facts, node.lineno)
    elif isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and facts.is_context(func.value):
            if func.attr == "update":
                for arg in node.args:
                    yield from _values(arg, facts, node.lineno)
                yield from _firsts(k.value for k in node.keywords if k.arg)
            elif func.attr == "setdefault" and len(node.args) == 2:
                yield node.args[1], True
        for keyword in node.keywords:
            if facts.context and keyword.arg and keyword.arg.endswith(facts.context):
                yield from _values(keyword.value, facts, node.lineno)


def _firsts(values: Iterator[ast.expr]) -> Iterator[tuple[ast.expr, bool]]:
    for index, value in enumerate(values):
        yield value, index == 0


def _values(
    node: ast.AST, facts: ScopeValues, line: int, depth: int = 0
) -> Iterator[tuple[ast.expr, bool]]:
    if isinstance(node, ast.Dict):
        yield from _firsts(v for k, v in zip(node.keys, node.values, strict=True) if k is not None)
    elif isinstance(node, ast.Call) and dotted(node.func) == "dict":
        yield from _firsts(k.value for k in node.keywords if k.arg)
        for arg in node.args:
            yield from _values(arg, facts, line, depth + 1)
    elif isinstance(node, ast.Name) and depth < _DEPTH:
        bound = facts.binding(node.id, line)
        if bound is not None and not facts.names_context(bound[1]):
            yield from _values(bound[1], facts, bound[0], depth + 1)


def stubs_in_scope(
    scope: Scope, ns_names: set[str], sites: EngineSites
) -> tuple[list[dict], list[dict]]:
    """(stored stubs, stand-ins) of `scope`; each stub carries ``q`` (the scope) and
    ``store`` / ``store_end`` (the storing statement's lines)."""
    facts = ScopeValues(scope, ns_names, sites.layer_context)
    stores: list[dict] = []
    for node in scope.nodes:
        for value, first in _stored(node, facts):
            shape = facts.read(value, getattr(node, "lineno", 0))
            if shape is None:
                continue
            shape.update(q=scope.qualname, store=node.lineno, store_end=node.end_lineno)  # type: ignore[attr-defined]
            shape["first"] = first
            stores.append(shape)
    for node in scope.nodes:
        handed = _handed(node, sites) if sites.layer_calls else None
        shape = facts.read_argument(handed[0], node) if handed else None  # type: ignore[arg-type]
        if handed and shape is not None:
            shape.update(q=scope.qualname, store=node.lineno, store_end=node.end_lineno)  # type: ignore[attr-defined]
            shape["method"] = handed[1]
            stores.append(shape)
    standins: list[dict] = []
    if scope.qualname.rsplit(".", 1)[-1] == "__new__":
        return stores, standins
    for node in scope.nodes:
        if not isinstance(node, ast.Call):
            continue
        cls = standin_class(node)
        if cls is None:
            continue
        var = next((n for n, bs in facts.bindings.items() for _, v in bs if v is node), None)
        standins.append(_standin(node, cls, var, scope, facts))
    return stores, standins


def _handed(node: ast.AST, sites: EngineSites) -> tuple[ast.expr, str] | None:
    """(the layer, the method) a call ``x.forward_decode(q, k, v, layer, batch)`` of one of
    the engine's `layer_calls` hands over, as ``layer=`` or at `layer_position`."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in sites.layer_calls
    ):
        return None
    for keyword in node.keywords:
        if keyword.arg == sites.layer_param:
            return keyword.value, node.func.attr
    before = node.args[: sites.layer_position + 1]
    if len(before) <= sites.layer_position or any(isinstance(a, ast.Starred) for a in before):
        return None
    return node.args[sites.layer_position], node.func.attr


def _raising_blocks(nodes: list[ast.AST]) -> set[int]:
    found: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.With | ast.AsyncWith) and any(
            isinstance(i.context_expr, ast.Call)
            and terminal(i.context_expr.func) in ("raises", "assertRaises", "assertRaisesRegex")
            for i in node.items
        ):
            found.update(id(n) for part in node.body for n in ast.walk(part))
    return found


def _bound_sets(value: ast.expr | None, var: str, scope: Scope) -> list[str]:
    """What ``types.MethodType(f, var)`` sets on `var` on every path, where ``f`` is a
    function defined in `scope` (the method `value` replaces runs as ``f`` instead)."""
    if not (
        isinstance(value, ast.Call)
        and terminal(value.func) == "MethodType"
        and len(value.args) == 2
        and isinstance(value.args[0], ast.Name)
        and dotted(value.args[1]) == var
    ):
        return []
    name = value.args[0].id
    for node in scope.nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            params = positional_args(node.args)
            own = params[0].arg if params else None
            return self_usage(own_nodes(node), own, node.body)["sets"]
    return []


def _standin(node: ast.Call, cls: str, var: str | None, scope: Scope, facts: ScopeValues) -> dict:
    record = _shape("standin", f"object.__new__({cls.rsplit('.', 1)[-1]})", node, cls)
    record.update(q=scope.qualname, var=var, calls=[], reads=[], init=False)
    if var is None:
        return record
    record["dynamic"] = var in facts.dynamic
    later = [(a, value) for line, a, value in facts.sets.get(var, []) if line >= node.lineno]
    record["attrs"] = sorted({a for a, _ in later})
    record["replaced"] = {
        a: sets for a, value in later for sets in [_bound_sets(value, var, scope)] if sets
    }
    expected_to_fail = _raising_blocks(scope.nodes)
    reads: list[tuple[str, int]] = []
    for other in scope.nodes:
        if id(other) in expected_to_fail:
            continue  # inside ``with pytest.raises(...)``: the test expects it to fail
        if isinstance(other, ast.Call) and isinstance(other.func, ast.Attribute):
            func = other.func
            if func.attr == "__init__" and other.args and dotted(other.args[0]) == var:
                record["init"] = True
            elif dotted(func.value) == var:
                (
                    record.__setitem__("init", True)
                    if func.attr == "__init__"
                    else record["calls"].append(func.attr)
                )
        elif (
            isinstance(other, ast.Attribute)
            and isinstance(other.ctx, ast.Load)
            and dotted(other.value) == var
        ):
            reads.append((other.attr, other.lineno))
    first_call = min(
        (
            n.lineno
            for n in scope.nodes
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and dotted(n.func.value) == var
        ),
        default=None,
    )
    if first_call is not None:  # what a call may have set is no requirement afterwards
        record["reads"] = [r for r, line in reads if line <= first_call]
    else:
        record["reads"] = [r for r, _ in reads]
    record["reads"] = sorted(set(record["reads"]) - set(record["calls"]))
    record["calls"] = sorted(set(record["calls"]))
    return record
