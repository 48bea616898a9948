"""What a builder's constructor reads from the model runner it is constructed over, and which
builders a registry's registering functions construct: STUB005's static side, for an engine
whose builders take a runner (SGLang: ``AiterAttnBackend(model_runner)``, registered by
``@register_attention_backend("aiter")`` in ``ATTENTION_BACKENDS``'s module).

* `init_runner_reads`: the dotted paths an ``__init__`` (of a class named as the engine
  names its builders, ``...Backend``) reads from its runner parameter (the first after
  ``self``) on every path, as the stand-in audit counts a read (`selfuse`: not
  under a branch, loop, ``except``, conditional expression or later ``and``/``or`` operand,
  not after an ``if`` that may return or raise, not in a nested function or lambda): through
  the parameter, a local bound to it (``runner = model_runner``), ``self.attr`` stored from it
  and a local bound to one of its attributes (``config = model_runner.model_config``, so
  ``config.dtype`` is ``model_config.dtype``). ``getattr(runner, "a", default)`` is no read.
  A path has two names at most (``model_config.dtype``). ``super().__init__(model_runner,
  ...)`` on every path hands the runner to the base's constructor.
* `registered_builders`: in a module that binds one of the engine's registries at top level,
  the key each module-level function is registered under (its decorator is a call with a
  string constant: ``@register_attention_backend("aiter")``) and the callees every function
  of the module returns (``return AiterAttnBackend(runner)``, or another registering
  function).
"""

from __future__ import annotations

import ast
from typing import Any

from conformance.audit.astutil import constant_str, dotted, own_nodes, positional_args, terminal
from conformance.audit.selfuse import after_early_exit, conditional_ids

_PATH = 2


def _runner_parameter(func: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, str] | None:
    """(``self``, the runner parameter): the first two positional parameters."""
    params = positional_args(func.args)
    return (params[0].arg, params[1].arg) if len(params) > 1 else None


def _prefixes(nodes: list[ast.AST], own: str, runner: str) -> dict[str, str]:
    """Dotted expression → the runner path it stands for ("" for the runner itself)."""
    found = {runner: ""}
    for _ in range(3):  # ``runner = model_runner``, then ``config = runner.model_config``
        for node in nodes:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target, value = dotted(node.targets[0]), dotted(node.value)
            if target is None or value is None or target in found:
                continue
            if not (
                target.count(".") == 0 or (target.startswith(f"{own}.") and target.count(".") == 1)
            ):
                continue
            head, _, attr = value.rpartition(".")
            if value in found:
                found[target] = found[value]
            elif head in found and found[head].count(".") < _PATH - 1:
                found[target] = f"{found[head]}.{attr}".lstrip(".")
    return found


def init_runner_reads(
    func: ast.FunctionDef | ast.AsyncFunctionDef, nodes: list[ast.AST] | None = None
) -> dict[str, Any] | None:
    """``{"reads": [path, ...], "super": bool}`` of an ``__init__`` (module docstring), whose
    own `nodes` (nested scopes left out) may be given; None when it takes no runner."""
    names = _runner_parameter(func)
    if names is None:
        return None
    own, runner = names
    nodes = own_nodes(func) if nodes is None else nodes
    if not any(isinstance(n, ast.Name) and n.id == runner for n in nodes):
        return {"reads": [], "super": False}
    prefixes = _prefixes(nodes, own, runner)
    branches = conditional_ids(nodes) | after_early_exit(func.body)
    inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
    reads: set[str] = set()
    hands_on = False
    for node in nodes:
        if id(node) in branches:
            continue
        if isinstance(node, ast.Call):
            first = dotted(node.args[0]) if node.args else None
            if _is_super_init(node) and first is not None and prefixes.get(first) == "":
                hands_on = True
            key = constant_str(node.args[1]) if len(node.args) == 2 else None
            if terminal(node.func) == "getattr" and key is not None:
                base = prefixes.get(first or "")
                if base is None and isinstance(node.args[0], ast.Attribute):
                    base = _path(node.args[0], prefixes)
                if base is not None:
                    reads.add(".".join([*base.split("."), key][:_PATH]).lstrip("."))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            path = None if id(node) in inner else _path(node, prefixes)
            if path:  # (the head of a longer chain is read as part of it)
                reads.add(path)
    return {"reads": sorted(reads), "super": hands_on}


def _is_super_init(call: ast.Call) -> bool:
    """Whether `call` is ``super().__init__(...)``."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and terminal(func.value.func) == "super"
    )


def _path(node: ast.Attribute, prefixes: dict[str, str]) -> str | None:
    """The runner path the chain `node` reads (two names at most), or None."""
    chain: list[str] = []
    current: ast.AST = node
    while isinstance(current, ast.Attribute):
        chain.append(current.attr)
        current = current.value
        text = dotted(current)
        if text in prefixes:
            parts = [p for p in prefixes[text].split(".") if p] + list(reversed(chain))
            return ".".join(parts[:_PATH]) or None
    return None


def registered_builders(module: ast.Module, registries: set[str]) -> dict[str, Any]:
    """``{"keys": {key: function}, "returns": {function: [callee, ...]}}`` of a module that
    binds one of `registries` (last names) at top level; {} for any other module."""
    bound = {
        t.id
        for stmt in module.body
        if isinstance(stmt, ast.Assign | ast.AnnAssign)
        for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        if isinstance(t, ast.Name)
    }
    if not bound & registries:
        return {}
    keys: dict[str, str] = {}
    returns: dict[str, list[str]] = {}
    for stmt in module.body:
        if not isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in stmt.decorator_list:
            key = (
                constant_str(decorator.args[0])
                if isinstance(decorator, ast.Call) and decorator.args
                else None
            )
            if key is not None:
                keys[key] = stmt.name
        callees = {
            dotted(n.value.func)
            for n in own_nodes(stmt)
            if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)
        }
        returns[stmt.name] = sorted(c for c in callees if c)
    return {"keys": keys, "returns": returns}
