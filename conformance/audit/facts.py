"""Per-file facts: what cross-file resolution needs from one module, and nothing more.

`extract` turns a parse tree into a small JSON-ready dict (so it can be cached by content
hash and shipped between processes): the import table, top-level aliases, every class
(bases, attributes, string members, what its methods read from layers, from record
parameters and from ``self``), consumer functions, and the construction sites, stored stubs
and stand-ins of `usage`, as one engine's sites (`sites.EngineSites`) define them. The parse
tree itself is dropped.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from conformance.audit import flow, handoffs, reach_facts, runner_reads, runner_shapes, usage
from conformance.audit.astutil import constant_str, dotted, iter_scopes, positional_args, terminal
from conformance.audit.definition import definition_facts
from conformance.audit.sites import VLLM, EngineSites

FACTS_VERSION = 24
"""Bumped whenever the facts' shape or meaning changes (invalidates the cache)."""

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
_LEGACY = re.compile(r"#\s*conformance-audit:\s*ignore(?:\[(?P<codes>[A-Za-z0-9_,\s]+)\])?")
_DOTTED_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def suppressions(text: str) -> dict[str, list[str]]:
    """Line → codes silenced on it: ``# noqa: CODE[, CODE]`` (bare ``# noqa`` silences all,
    ``"*"``) and the older ``# conformance-audit: ignore[CODE]``."""
    table: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if "noqa" not in line and "conformance-audit" not in line:
            continue
        for pattern in (_NOQA, _LEGACY):
            match = pattern.search(line)
            if match is None:
                continue
            codes = match.group("codes")
            found = ["*"] if codes is None else [c.upper() for c in re.split(r"[\s,]+", codes) if c]
            table.setdefault(str(number), []).extend(found)
    return table


def extract(module: ast.Module, text: str, sites: EngineSites = VLLM) -> dict[str, Any]:
    """The facts of one parsed module (see the module docstring)."""
    scopes = list(iter_scopes(module))
    every = [node for scope in scopes for node in scope.nodes]
    imports, stars = _imports(every)
    facts: dict[str, Any] = {
        "v": FACTS_VERSION,
        "imports": imports,
        "stars": stars,
        "aliases": _aliases(module),
        "classes": {},
        "functions": {},
        "sites": [],
        "stores": [],
        "standins": [],
        "refs": {},
        "globals": {},
        "patched": {},
        "called": [],
        "speculative": [],
        "params": {},
        "noqa": suppressions(text),
        "cam_defs": [],
        "transforms": [],
        "passes": [],
        "runner_stubs": [],
        "registered": {},
    }
    record = sites.record
    cam_names = {record} | {local for local, (_, _, name) in imports.items() if name == record}
    cam_names |= {a for a, ref in facts["aliases"].items() if ref.endswith(record)}
    ns_names = {local for local, (_, mod, name) in imports.items() if name == "SimpleNamespace"}
    wants_cam = any(word in text for word in sites.record_mentions)
    layer_words = (sites.layer_context, sites.typed_lookup, *sites.layer_calls)
    wants_layers = any(w and w in text for w in layer_words)
    wants_standins = "__new__" in text
    runner_words = [r.rsplit(".", 1)[-1] for r in sites.registries]
    runner_words += [f"{sites.builder_suffix}("] if sites.builder_suffix else []
    wants_runners = bool(sites.runner) and any(word in text for word in runner_words)
    by_name = {scope.qualname: scope for scope in scopes}
    for scope in scopes:
        if scope.kind == "class":
            facts["classes"][scope.qualname] = _class_facts(
                scope.node,  # type: ignore[arg-type]
                scope.qualname,
                by_name,
                sites,
                wants_layers=wants_layers,
                wants_cam=wants_cam,
            )
            if scope.node.name == record:  # type: ignore[attr-defined]
                definition = definition_facts(scope.node)  # type: ignore[arg-type]
                if definition is not None:
                    facts["cam_defs"].append(definition)
            continue
        if (
            scope.kind == "function"
            and wants_cam
            and "." not in scope.qualname.replace(".<locals>.", "")
        ):
            needs = usage.consumer_needs(scope.node, sites)  # type: ignore[arg-type]
            if needs is not None:
                calls = handoffs.record_calls(scope.node, sites)  # type: ignore[arg-type]
                facts["functions"][scope.qualname] = {"cam": needs, "calls": calls}
        found = False
        if wants_cam:
            calls, passes = flow.record_value_flows(scope.qualname, scope.nodes)
            facts["transforms"] += calls
            facts["passes"] += passes
            built = usage.cam_sites(scope, cam_names, sites)
            facts["sites"] += built
            found = found or bool(built)
        if (wants_layers or wants_standins) and usage.may_hold_stubs(scope, sites):
            stores, standins = usage.stubs_in_scope(scope, ns_names, sites)
            facts["stores"] += stores
            facts["standins"] += standins
            found = found or bool(stores)
        if wants_runners:
            facts["runner_stubs"] += runner_shapes.runner_stubs_in_scope(scope, ns_names, sites)
        if found:
            facts["refs"][scope.qualname] = usage.scope_refs(scope)
    if facts["sites"] or facts["stores"]:
        for scope in scopes:
            if scope.kind != "class":
                if scope.qualname not in facts["refs"]:
                    facts["refs"][scope.qualname] = usage.scope_refs(scope)
                params = reach_facts.parameters(scope.node)
                if params:
                    facts["params"][scope.qualname] = params
                if facts["sites"] and reach_facts.configures_speculation(scope.nodes, sites):
                    facts["speculative"].append(scope.qualname)
        facts["globals"] = reach_facts.module_globals(module)
    if facts["sites"] or facts["stores"] or facts["standins"]:
        for scope in scopes:
            patched = reach_facts.patched_methods(scope) if scope.kind != "class" else []
            if patched:
                facts["patched"][scope.qualname] = patched
    if wants_cam:
        facts["called"] = reach_facts.called_methods(every)
    if sites.registries:
        names = {r.rsplit(".", 1)[-1] for r in sites.registries}
        facts["registered"] = runner_reads.registered_builders(module, names)
    return facts


def _imports(nodes: list[ast.AST]) -> tuple[dict[str, list[Any]], list[list[Any]]]:
    table: dict[str, list[Any]] = {}
    stars: list[list[Any]] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    table[alias.asname] = [0, alias.name, None]
                else:
                    head = alias.name.split(".", 1)[0]
                    table.setdefault(head, [0, head, None])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    stars.append([node.level, node.module or ""])
                else:
                    table[alias.asname or alias.name] = [node.level, node.module or "", alias.name]
    return table, stars


def _aliases(module: ast.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
            ref = dotted(node.value)
            for target in node.targets:
                if isinstance(target, ast.Name) and ref:
                    found[target.id] = ref
    return found


def _class_facts(
    node: ast.ClassDef,
    qualname: str,
    scopes: dict,
    sites: EngineSites,
    *,
    wants_layers: bool,
    wants_cam: bool,
) -> dict[str, Any]:
    cattrs: set[str] = set()
    iattrs: set[str] = set()
    members: dict[str, str] = {}
    methods: dict[str, Any] = {}
    layer: dict[str, Any] = {}
    cam: dict[str, list[str]] = {}
    cam_calls: dict[str, list[str]] = {}
    returns: dict[str, list[str]] = {}
    dynamic = False
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cattrs.add(stmt.name)
            dynamic = dynamic or stmt.name in ("__getattr__", "__getattribute__")
            params = positional_args(stmt.args)
            static = any(terminal(d) == "staticmethod" for d in stmt.decorator_list)
            self_name = params[0].arg if params and not static else None
            method_scope = scopes.get(f"{qualname}.{stmt.name}")
            info = usage.self_usage(
                method_scope.nodes if method_scope else [], self_name, stmt.body
            )
            iattrs |= set(info["sets"])
            dynamic = dynamic or info.pop("dynamic")
            refs = info.pop("returns")
            methods[stmt.name] = info
            if refs:
                returns[stmt.name] = refs
            if wants_layers:
                reads = usage.layer_reads(stmt, sites)
                if reads is not None:
                    layer[stmt.name] = reads
            if wants_cam:
                needs = usage.consumer_needs(stmt, sites)
                if needs is not None:
                    cam[stmt.name] = needs
                    calls = handoffs.record_calls(stmt, sites)
                    if calls:
                        cam_calls[stmt.name] = calls
        elif isinstance(stmt, ast.ClassDef):
            cattrs.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                cattrs |= _target_names(target)
                value = constant_str(stmt.value)
                if isinstance(target, ast.Name) and value and _DOTTED_PATH.match(value):
                    members[target.id] = value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            (cattrs if stmt.value is not None else iattrs).add(stmt.target.id)
    return {
        "line": node.lineno,
        "bases": [dotted(b) for b in node.bases],
        "cattrs": sorted(cattrs),
        "iattrs": sorted(iattrs),
        "dynamic": dynamic,
        "members": members,
        "methods": methods,
        "returns": returns,
        "layer": layer,
        "cam": cam,
        "cam_calls": cam_calls,
        "attr_types": flow.attribute_types(node) if wants_cam else {},
        "layer_named": any(terminal(b) == sites.layer for b in node.bases),
        "init_params": runner_shapes.init_params(node) if sites.runner else {},
        "runner": _init_runner_reads(node, qualname, scopes, sites) if sites.runner else None,
    }


def _init_runner_reads(
    node: ast.ClassDef, qualname: str, scopes: dict, sites: EngineSites
) -> dict[str, Any] | None:
    """What the class's own ``__init__`` reads from its runner (`runner_reads`), for a class
    named as the engine names its builders (``...Backend``)."""
    if not node.name.endswith(sites.builder_suffix):
        return None
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__init__":
            scope = scopes.get(f"{qualname}.__init__")
            return runner_reads.init_runner_reads(stmt, scope.nodes if scope else None)
    return None


def _target_names(target: ast.AST) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(e) for e in target.elts)) if target.elts else set()
    return set()
