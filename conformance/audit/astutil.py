"""Small AST helpers shared by the extractors: dotted names, scopes, guards."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
MAX_DOTS = 6


def dotted(node: ast.AST | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain (``X[int]`` reads as ``X``), else None."""
    parts: list[str] = []
    if isinstance(node, ast.Subscript):
        node = node.value
    while isinstance(node, ast.Attribute) and len(parts) < MAX_DOTS:
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def terminal(node: ast.AST | None) -> str | None:
    """The last name of a dotted expression, or of a string annotation."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit(".", 1)[-1].strip("'\" ") or None
    text = dotted(node)
    return text.rsplit(".", 1)[-1] if text else None


def sets_attribute(call: ast.Call) -> bool:
    """Whether `call` sets the attribute its second argument names on its first:
    ``setattr``, ``object.__setattr__``, ``monkeypatch.setattr``, or ``patch.object`` (the
    attribute is replaced while the patch is active: a context manager, a decorator,
    ``start()``)."""
    name = terminal(call.func)
    if name == "object":
        return (dotted(call.func) or "").endswith("patch.object")
    return name in ("setattr", "__setattr__")


def positional_args(args: ast.arguments) -> list[ast.arg]:
    """The positional parameters of a signature, in order (a method's first is its self,
    whatever its name)."""
    return [*args.posonlyargs, *args.args]


def named_args(args: ast.arguments) -> list[ast.arg]:
    """The named parameters of a signature: the positional ones, then the keyword-only ones
    (not ``*args`` or ``**kwargs``)."""
    return [*positional_args(args), *args.kwonlyargs]


def constant_str(node: ast.AST | None) -> str | None:
    """The value of a string literal, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


@dataclass
class Scope:
    """The nodes that run in one module, class body or function body."""

    node: ast.AST
    kind: str
    """module, class or function."""
    qualname: str
    nodes: list[ast.AST]
    """Every node of this scope in source order, nested def and class bodies left out."""


def iter_scopes(module: ast.Module) -> Iterator[Scope]:
    """Every scope of `module`, outermost first."""
    pending: list[tuple[ast.AST, str, str]] = [(module, "module", "<module>")]
    while pending:
        node, kind, qualname = pending.pop(0)
        own, nested = _members(node)
        yield Scope(node, kind, qualname, own)
        for child in nested:
            name = "<lambda>" if isinstance(child, ast.Lambda) else child.name  # type: ignore[attr-defined]
            child_kind = "class" if isinstance(child, ast.ClassDef) else "function"
            if kind == "module":
                child_q = name
            elif kind == "function":
                child_q = f"{qualname}.<locals>.{name}"
            else:
                child_q = f"{qualname}.{name}"
            pending.append((child, child_kind, child_q))


def own_nodes(node: ast.AST) -> list[ast.AST]:
    """The nodes of the scope `node` opens (a function's body), nested scopes left out."""
    return _members(node)[0]


def _members(node: ast.AST) -> tuple[list[ast.AST], list[ast.AST]]:
    stack: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)  # type: ignore[attr-defined]
    own: list[ast.AST] = []
    nested: list[ast.AST] = []
    while stack:
        current = stack.pop()
        own.append(current)
        if isinstance(current, _FUNCTIONS):
            nested.append(current)
            stack.extend(current.args.defaults)
            stack.extend(d for d in current.args.kw_defaults if d is not None)
            if not isinstance(current, ast.Lambda):
                stack.extend(current.decorator_list)
        elif isinstance(current, ast.ClassDef):
            nested.append(current)
            stack.extend(current.decorator_list)
            stack.extend(current.bases)
        else:
            stack.extend(ast.iter_child_nodes(current))
    own.sort(key=position)
    nested.sort(key=position)
    return own, nested


def self_assignments(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
) -> Iterator[tuple[str, ast.expr]]:
    """(``attr``, value) for each ``self.attr = value`` in method `func` (its first
    parameter is ``self``, whatever its name; nested scopes included)."""
    params = positional_args(func.args)
    if not params:
        return
    own = params[0].arg
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == own
            ):
                yield target.attr, node.value


def position(node: ast.AST) -> tuple[int, int]:
    """(line, column) for sorting."""
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def parents(root: ast.AST) -> dict[int, ast.AST]:
    """id(child) → parent for every node below `root`."""
    table: dict[int, ast.AST] = {}
    for node in ast.walk(root):
        for child in ast.iter_child_nodes(node):
            table[id(child)] = node
    return table


def guards(root: ast.AST) -> dict[int, set[str]]:
    """id(node) → the dotted expressions a branch above it inspects: the first argument of
    ``isinstance``/``hasattr``/``getattr``, an ``x is None`` / ``x is not None`` operand, or a
    bare truthiness test. Reads of those there are conditional, so not requirements."""
    found: dict[int, set[str]] = {}

    def mark(parts: list, inspected: set[str]) -> None:
        for part in parts:
            for n in ast.walk(part):
                found.setdefault(id(n), set()).update(inspected)

    for node in ast.walk(root):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            inspected = inspected_exprs(node.test)
            if inspected:
                body = node.body if isinstance(node.body, list) else [node.body]
                orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
                mark([*body, *orelse], inspected)
        elif isinstance(node, ast.BoolOp):
            inspected = set().union(*(inspected_exprs(v) for v in node.values[:-1]))
            if inspected:
                mark(node.values[1:], inspected)
    return found


def inspected_exprs(test: ast.AST) -> set[str]:
    """The dotted expressions a branch test inspects (see `guards`)."""
    result: set[str] = set()
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and terminal(node.func) in (
            "isinstance",
            "hasattr",
            "getattr",
        ):
            text = dotted(node.args[0]) if node.args else None
            if text:
                result.add(text)
        elif isinstance(node, ast.Compare) and any(
            isinstance(c, ast.Constant) and c.value is None for c in node.comparators
        ):
            text = dotted(node.left)
            if text:
                result.add(text)
    bare = test.operand if isinstance(test, ast.UnaryOp) else test
    for value in bare.values if isinstance(bare, ast.BoolOp) else [bare]:
        value = value.operand if isinstance(value, ast.UnaryOp) else value
        if isinstance(value, (ast.Name, ast.Attribute)) and dotted(value):
            result.add(dotted(value))  # type: ignore[arg-type]
    return result
