"""What one function does that the audits care about, as JSON-ready facts.

* `layer_reads`: the attributes a builder method reads from layer objects taken out of the
  engine's layer context (vLLM's ``static_forward_context``, directly or through
  ``get_layers_from_vllm_config(cfg, Type)``, which only yields instances of ``Type``), or
  from its layer parameter (SGLang's ``forward_decode(self, q, k, v, layer, ...)``);
  reads under a branch that inspects the layer (``isinstance``, ``hasattr``, ``is None``)
  and ``getattr(layer, name, default)`` are not requirements.
* `consumer_needs`: the record fields (`EngineSites.record`) a function taking the record
  dereferences or asserts (``cam.f.x``, ``cam.f[i]``, ``cam.f + 1``, ``assert cam.f is not
  None``, also through ``v = cam.f``) outside a branch that tests that field for ``None``.
* `self_usage`: what a method sets on, reads from and calls on ``self``.
* `cam_sites`, `stubs_in_scope` (`shapes`) and `scope_refs`.
"""

from __future__ import annotations

import ast
from typing import Any

from conformance.audit.astutil import Scope, dotted, guards, named_args, parents, terminal
from conformance.audit.conditions import derived_names, none_fallbacks, unrequired_ids
from conformance.audit.filled import later_fields, mode_member
from conformance.audit.modes import mode_branch_ids
from conformance.audit.selfuse import self_usage
from conformance.audit.shapes import stubs_in_scope
from conformance.audit.sites import EngineSites

__all__ = [
    "cam_sites",
    "consumer_needs",
    "layer_reads",
    "scope_refs",
    "self_usage",
    "stubs_in_scope",
]


def _is_context(node: ast.AST, ctx_names: set[str], context: str) -> bool:
    text = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return text is not None and (text.endswith(context) or text in ctx_names)


def record_parameters(func: ast.FunctionDef | ast.AsyncFunctionDef, sites: EngineSites) -> set[str]:
    """`func`'s parameters that hold the record: named as the engine names it, or annotated
    with the record class."""
    return {
        a.arg
        for a in named_args(func.args)
        if a.arg in sites.record_params or terminal(a.annotation) == sites.record
    }


def _first_layer(node: ast.AST) -> bool:
    """Whether `node` is ``ctx[names[0]]``: the first layer of the group only."""
    index = node.slice if isinstance(node, ast.Subscript) else None
    return (
        isinstance(index, ast.Subscript)
        and isinstance(index.slice, ast.Constant)
        and index.slice.value == 0
    )


def layer_reads(
    func: ast.FunctionDef | ast.AsyncFunctionDef, sites: EngineSites
) -> list[list[Any]] | None:
    """``[[attr_path, type_filter_or_None, "first"|"every"], ...]`` read from layers in
    `func` (``first``: read from ``ctx[layer_names[0]]`` only); None when `func` takes no
    layer out of a context at all, nor is a method layers are handed to that takes the
    engine's `layer_param` (SGLang's ``forward_decode(self, q, k, v, layer, ...)``).
    Reads behind a condition not about the layers, or deferred (`conditions`), or on some
    modes of the batch only (`modes`), are left out."""
    context, lookup = sites.layer_context, sites.typed_lookup
    params = named_args(func.args)
    if func.name in sites.layer_calls and any(a.arg == sites.layer_param for a in params):
        layer = {sites.layer_param: None}
        return _reads_of(func, list(ast.walk(func)), layer, set(), set(layer), sites)
    if not context:
        return None
    nodes = list(ast.walk(func))
    ctx_names = {a.arg for a in params if a.arg.endswith(context)}
    typed: dict[str, str | None] = {}  # name of a get_layers_from_vllm_config result → type
    layers: dict[str, str | None] = {}  # layer variable → type filter (None: any object)
    firsts: set[str] = set()  # layer variables bound to the first layer only
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name):
                if _is_context(value, ctx_names, context):
                    ctx_names.add(target.id)
                elif lookup and isinstance(value, ast.Call) and terminal(value.func) == lookup:
                    kind = value.args[1] if len(value.args) > 1 else None
                    kind = kind or next(
                        (k.value for k in value.keywords if k.arg == "layer_type"), None
                    )
                    typed[target.id] = dotted(kind) or "?"
    touched = False
    for node in nodes:
        source = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            source, targets = node.value, [node.targets[0]]
        elif isinstance(node, (ast.For, ast.comprehension)):
            source, targets = node.iter, [node.target]
        else:
            continue
        kind = _layer_source(source, ctx_names, typed, context)
        if kind is False:
            continue
        touched = True
        for target in targets:
            if isinstance(target, ast.Tuple) and len(target.elts) == 2:
                target = target.elts[1]
            if isinstance(target, ast.Name):
                layers[target.id] = kind  # type: ignore[assignment]
                if _first_layer(source):
                    firsts.add(target.id)
                else:
                    firsts.discard(target.id)
    seed = ctx_names | set(layers) | set(typed) | {a.arg for a in params if "layer" in a.arg}
    if not touched and not any(
        isinstance(n, ast.Subscript) and _is_context(n.value, ctx_names, context) for n in nodes
    ):
        return None
    reads = _reads_of(func, nodes, layers, firsts, seed, sites, ctx_names)
    return reads if touched or reads else None


def _reads_of(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    nodes: list[ast.AST],
    layers: dict[str, str | None],
    firsts: set[str],
    seed: set[str],
    sites: EngineSites,
    ctx_names: frozenset[str] | set[str] = frozenset(),
) -> list[list[Any]]:
    """What `func` reads on every path from the layer variables `layers` (and, with the
    engine's layer context, from ``ctx[name]`` directly), as `layer_reads` lists it."""
    context = sites.layer_context
    lazy = unrequired_ids(func, derived_names(func, seed))
    if sites.mode_field:
        lazy |= mode_branch_ids(func, sites.mode_field)
    branch = guards(func)
    up = parents(func)
    reads: set[tuple[str, str | None, str]] = set()
    for node in nodes:
        if id(node) in lazy:
            continue
        if isinstance(node, ast.Call) and terminal(node.func) == "getattr" and len(node.args) == 2:
            base, key = node.args
            if isinstance(base, ast.Name) and base.id in layers and isinstance(key, ast.Constant):
                scope = "first" if base.id in firsts else "every"
                reads.add((str(key.value), layers[base.id], scope))
            continue
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in layers:
            kind = layers[base.id]
            scope = "first" if base.id in firsts else "every"
            inspected = branch.get(id(node), set())
            if base.id in inspected or f"{base.id}.{node.attr}" in inspected:
                continue
        elif (
            context
            and isinstance(base, ast.Subscript)
            and _is_context(base.value, ctx_names, context)
        ):
            kind = None
            scope = "first" if _first_layer(base) else "every"
        else:
            continue
        path = node.attr
        parent = up.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            path += "." + parent.attr
        reads.add((path, kind, scope))
    return [list(r) for r in sorted(reads, key=lambda r: (r[0], r[1] or "", r[2]))]


def _layer_source(node: ast.AST, ctx: set[str], typed: dict[str, str | None], context: str) -> Any:
    """The type filter (None for any) if `node` yields layers, else False."""
    if isinstance(node, ast.Subscript):
        if _is_context(node.value, ctx, context):
            return None
        if isinstance(node.value, ast.Name) and node.value.id in typed:
            return typed[node.value.id]
    if isinstance(node, ast.Call):
        func = node.func
        if terminal(func) in ("next", "iter", "list", "tuple") and node.args:
            return _layer_source(node.args[0], ctx, typed, context)
        if isinstance(func, ast.Attribute) and func.attr in ("values", "items", "get"):
            if _is_context(func.value, ctx, context):
                return None
            if isinstance(func.value, ast.Name) and func.value.id in typed:
                return typed[func.value.id]
    return False


def consumer_needs(
    func: ast.FunctionDef | ast.AsyncFunctionDef, sites: EngineSites
) -> list[str] | None:
    """Fields `func` requires of its record parameter (module docstring); None when it has
    no such parameter. A field read only on the prefill path (under a branch testing a
    ``*prefill*`` name, ``if num_prefills > 0:``) is listed as ``field@prefill``:
    decode-only batches do not need it. A read on some of the batch's modes only (`modes`)
    is no requirement."""
    params = record_parameters(func, sites)
    if not params:
        return None
    for node in ast.walk(func):  # ``cam = common_attn_metadata``: another name for it
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Name)
            and node.value.id in params
        ):
            params.add(node.targets[0].id)
    aliases: dict[str, str] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            value, target = node.value, node.targets[0]
            if (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id in params
                and isinstance(target, ast.Name)
            ):
                aliases[target.id] = value.attr
    fallbacks = none_fallbacks(func, set(aliases)) if aliases else set()
    branch = guards(func)
    up = parents(func)
    needs: dict[str, bool] = {}  # field → read on the prefill path only
    lazy: set[int] | None = None
    for node in ast.walk(func):
        field = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in params and isinstance(node.ctx, ast.Load):
                field, text = node.attr, f"{node.value.id}.{node.attr}"
        elif (
            isinstance(node, ast.Name)
            and node.id in aliases
            and node.id not in fallbacks
            and isinstance(node.ctx, ast.Load)
        ):
            field, text = aliases[node.id], node.id
        if field is None or text in branch.get(id(node), set()):
            continue
        if not _dereferenced(node, up):
            continue
        if lazy is None:  # computed only for functions that dereference the record
            lazy = unrequired_ids(func, derived_names(func, params))
            if sites.mode_field:
                lazy |= mode_branch_ids(func, sites.mode_field)
        if id(node) not in lazy:
            needs[field] = needs.get(field, True) and on_prefill_path(node, up)
    return sorted(f"{f}{PREFILL_ONLY}" if only else f for f, only in needs.items())


PREFILL_ONLY = "@prefill"


def on_prefill_path(node: ast.AST, up: dict[int, ast.AST]) -> bool:
    """Whether `node` sits under a branch whose test names a ``*prefill*`` value."""
    child, parent = node, up.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is not parent.test:
            names = [dotted(n) or "" for n in ast.walk(parent.test) if isinstance(n, ast.Name)]
            names += [n.attr for n in ast.walk(parent.test) if isinstance(n, ast.Attribute)]
            if any("prefill" in name.lower() for name in names):
                return True
        child, parent = parent, up.get(id(parent))
    return False


def _dereferenced(node: ast.AST, up: dict[int, ast.AST]) -> bool:
    parent = up.get(id(node))
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return True
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return True
    if isinstance(parent, ast.BinOp):
        return True
    if isinstance(parent, ast.Call) and terminal(parent.func) in (
        "len",
        "int",
        "max",
        "min",
        "sum",
    ):
        return node in parent.args
    if isinstance(parent, ast.Compare) and isinstance(up.get(id(parent)), ast.Assert):
        return any(isinstance(op, ast.IsNot) for op in parent.ops)
    return False


def cam_sites(scope: Scope, cam_names: set[str], sites: EngineSites) -> list[dict[str, Any]]:
    """Calls of the record class (by name, alias or attribute) in `scope`; for an engine that
    fills its record later, with the fields it sets afterwards and its literal mode
    (`filled`)."""
    found = []
    for node in scope.nodes:
        if not isinstance(node, ast.Call):
            continue
        callee = dotted(node.func)
        if callee is None or not (callee.rsplit(".", 1)[-1] == sites.record or callee in cam_names):
            continue
        site: dict[str, Any] = {
            "line": node.lineno,
            "col": node.col_offset,
            "end": node.end_lineno or node.lineno,
            "q": scope.qualname,
            "callee": callee,
            "npos": 0,
            "pos_none": [],
            "kw": [],
            "kw_none": [],
            "unpacked": False,
        }
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                site["unpacked"] = True
                break
            if isinstance(arg, ast.Constant) and arg.value is None:
                site["pos_none"].append(site["npos"])
            site["npos"] += 1
        for keyword in node.keywords:
            pairs = [(keyword.arg, keyword.value)] if keyword.arg else _literal_items(keyword.value)
            if pairs is None:
                site["unpacked"] = True
                continue
            for name, value in pairs:
                site["kw"].append(name)
                if isinstance(value, ast.Constant) and value.value is None:
                    site["kw_none"].append(name)
        if sites.filled_later:
            site["later"] = later_fields(scope, node)
        if sites.mode_field:
            site["mode"] = mode_member(node, sites.mode_field)
        found.append(site)
    return found


def _literal_items(node: ast.AST) -> list[tuple[str, ast.expr]] | None:
    if isinstance(node, ast.Dict):
        keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
        if all(isinstance(k, str) for k in keys):
            return list(zip(keys, node.values, strict=True))  # type: ignore[arg-type]
        return None
    if isinstance(node, ast.Call) and terminal(node.func) == "dict" and not node.args:
        if all(k.arg for k in node.keywords):
            return [(k.arg, k.value) for k in node.keywords]  # type: ignore[misc]
    return None


def may_hold_stubs(scope: Scope, sites: EngineSites) -> bool:
    """Whether `scope` names a layer context, calls ``__new__`` or a method layers are
    handed to (cheap gate before `shapes`)."""
    context = sites.layer_context or "__new__"
    for node in scope.nodes:
        if isinstance(node, ast.Attribute):
            if node.attr == "__new__" or node.attr.endswith(context):
                return True
            if node.attr in sites.layer_calls:
                return True
        elif isinstance(node, ast.Name):
            if node.id.endswith(context):
                return True
        elif isinstance(node, ast.keyword) and node.arg and node.arg.endswith(context):
            return True
    return False


def scope_refs(scope: Scope) -> list[str]:
    """Every whole dotted name the scope loads (to tell which builders it reaches); the
    ``a`` of ``a.b`` is not listed on its own."""
    return maximal_refs(scope.nodes)


def maximal_refs(nodes: list[ast.AST]) -> list[str]:
    """The dotted names loaded among `nodes`, prefixes of longer chains left out."""
    inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
    return sorted(
        {
            text
            for node in nodes
            if isinstance(node, (ast.Name, ast.Attribute))
            and isinstance(node.ctx, ast.Load)
            and id(node) not in inner
            for text in [dotted(node)]
            if text
        }
    )
