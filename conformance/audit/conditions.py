"""Which reads of a function are requirements: the ones that run whenever the audited object
(the record, a layer) is used, not those behind an unrelated condition or deferred.

A read is *not* a requirement when it sits

* in a branch (``if``, ``while``, a conditional expression, the right operand of ``and`` /
  ``or``) whose test mentions nothing derived from the audited object: a configuration flag
  (``if self.use_dcp:``, ``compress_ratio == 128``) decides it, not the object;
* in a loop body, or a comprehension, over a collection not derived from the object (it may
  be empty);
* in a lambda, a nested function or a nested class (it runs later, or never).

*Derived* names are the object's own (the record parameter, the layer variables, the layer
names) and every local assigned from an expression mentioning a derived name, so
``num_prefills`` from ``split_decodes_and_prefills(common_attn_metadata)`` is derived and a
read under ``if num_prefills > 0:`` is a requirement of batches with prefills.
"""

from __future__ import annotations

import ast

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_DEFERRED = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def mentions(node: ast.AST | None, names: set[str]) -> bool:
    """Whether `node` loads any of `names`."""
    if node is None:
        return False
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def decides(test: ast.AST, derived: set[str]) -> bool:
    """Whether branch `test` is about the object's batch itself: it mentions a derived name
    other than in a presence test (``x is None``, ``x is not None``). A branch on whether an
    optional field is present (``if cam.mm_ranges is not None and ...:``) guards its body:
    what the body reads is needed only with that field, so it is no requirement."""
    presence = {
        id(n)
        for c in ast.walk(test)
        if isinstance(c, ast.Compare)
        and any(isinstance(op, (ast.Is, ast.IsNot)) for op in c.ops)
        and any(_is_none(x) for x in c.comparators)
        for n in ast.walk(c)
    }
    return any(
        isinstance(n, ast.Name) and n.id in derived and id(n) not in presence
        for n in ast.walk(test)
    )


def _target_names(target: ast.AST) -> set[str]:
    """The local names an assignment target binds (not ``self`` of ``self.x = ...``)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(e) for e in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return set()


def derived_names(func: ast.AST, seed: set[str]) -> set[str]:
    """`seed` and every local assigned (directly or through others) from one of them."""
    names = set(seed)
    flows: list[tuple[set[str], set[str]]] = []
    for node in ast.walk(func):
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            pairs = [(node.value, t) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value:
            pairs = [(node.value, node.target)]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            pairs = [(node.iter, node.target)]
        for value, target in pairs:
            loaded = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            flows.append((loaded, _target_names(target)))
    for _ in range(6):
        before = len(names)
        for loaded, targets in flows:
            if loaded & names:
                names |= targets
        if len(names) == before:
            break
    return names


def unrequired_ids(func: ast.AST, derived: set[str]) -> set[int]:
    """Ids of the nodes of `func` whose reads are no requirement (module docstring)."""
    found: set[int] = set()
    for node in ast.walk(func):
        if node is func:
            continue
        parts: list[ast.AST] = []
        if isinstance(node, _DEFERRED):
            parts = [node]
        elif isinstance(node, _COMPREHENSIONS):
            first = node.generators[0]
            if not mentions(first.iter, derived):
                parts = [n for n in ast.iter_child_nodes(node) if n is not first]
                parts += [first.target, *first.ifs]
        elif isinstance(node, (ast.If, ast.While)):
            if not decides(node.test, derived):
                parts = [*node.body, *node.orelse]
        elif isinstance(node, ast.IfExp):
            if not decides(node.test, derived):
                parts = [node.body, node.orelse]
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            if not mentions(node.iter, derived):
                parts = [*node.body, *node.orelse]
        elif isinstance(node, ast.BoolOp):
            for index, value in enumerate(node.values[1:], start=1):
                if not any(decides(v, derived) for v in node.values[:index]):
                    parts.append(value)
        for part in parts:
            if id(part) not in found:
                found.update(id(n) for n in ast.walk(part))
    return found


def none_fallbacks(func: ast.AST, aliases: set[str]) -> set[str]:
    """The `aliases` that get a fallback: tested against ``None`` in a branch (not an
    ``assert``), or assigned again (``v = cam.f`` then ``if v is None: v = default``)."""
    found: set[str] = set()
    assigned: dict[str, int] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in _target_names(target) & aliases:
                    assigned[name] = assigned.get(name, 0) + 1
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)):
            for part in ast.walk(node.test):
                if (
                    isinstance(part, ast.Compare)
                    and isinstance(part.left, ast.Name)
                    and part.left.id in aliases
                    and any(_is_none(c) for c in part.comparators)
                ):
                    found.add(part.left.id)
    return found | {name for name, count in assigned.items() if count > 1}


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
