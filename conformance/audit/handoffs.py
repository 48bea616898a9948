"""Helpers a consumer hands the record to: what they need, the consumer needs.

A builder's ``build`` often passes the record to a module function before reading it
itself (``split_decodes_prefills_and_extends(common_attn_metadata, ...)``, which asserts
``seq_lens_cpu_upper_bound`` on mixed batches). `record_calls` lists, per function, the
calls that hand the record over whenever the function runs (the same "Requirements" as a
read: not under an unrelated branch, in a lambda or a comprehension's per-element part);
`helper_needs` resolves one through the imports to a consumer function of the tree and
returns what it needs (and what the helpers it hands the record to need). A private method
handed the record by another method of its class (``self._build_c128a_metadata(cm)``) is a
helper of that method, not an entry point: what it needs counts where it is called whenever the
caller runs (`method_table`).
"""

from __future__ import annotations

import ast
from typing import Any

from conformance.audit.astutil import dotted, parents
from conformance.audit.conditions import derived_names, unrequired_ids
from conformance.audit.modes import mode_branch_ids
from conformance.audit.sites import EngineSites
from conformance.audit.usage import PREFILL_ONLY, on_prefill_path, record_parameters

_DEPTH = 3


def record_params(func: ast.FunctionDef | ast.AsyncFunctionDef, sites: EngineSites) -> set[str]:
    """The names the record goes by in `func`: its parameter, and ``cam = parameter``."""
    params = record_parameters(func, sites)
    for node in ast.walk(func):
        if (
            params
            and isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Name)
            and node.value.id in params
        ):
            params.add(node.targets[0].id)
    return params


def record_calls(func: ast.FunctionDef | ast.AsyncFunctionDef, sites: EngineSites) -> list[str]:
    """Dotted callees `func` hands its record to whenever it runs (``name@prefill`` when
    only on the prefill path); one handed the record only sometimes is listed as ``?name``
    (a method of its own class so handed is a helper, not an entry point; a transformed
    record may reach any of them)."""
    params = record_params(func, sites)
    if not params:
        return []
    calls = []
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        values = [*node.args, *(k.value for k in node.keywords)]
        if not any(isinstance(v, ast.Name) and v.id in params for v in values):
            continue
        callee = dotted(node.func)
        if callee is None or callee.startswith("cls."):
            continue
        if callee.count(".") <= 1 or (callee.startswith("self.") and callee.count(".") == 2):
            calls.append((node, callee))
    if not calls:
        return []
    lazy = unrequired_ids(func, derived_names(func, params))
    if sites.mode_field:
        lazy |= mode_branch_ids(func, sites.mode_field)
    up = parents(func)
    found = set()
    for node, callee in calls:
        if id(node) in lazy:
            found.add(f"?{callee}")
            continue
        found.add(f"{callee}{PREFILL_ONLY}" if on_prefill_path(node, up) else callee)
    return sorted(found)


def helper_needs(index: Any, module: str, ref: str, depth: int = 0) -> list[str]:
    """What the tree's consumer function `ref` (as seen from `module`) needs of the record,
    with what the helpers it hands the record to need; [] when it is not one."""
    found = resolve_function(index, module, ref)
    if found is None or depth > _DEPTH:
        return []
    where, info = found
    needs = list(info.get("cam", []))
    for call in info.get("calls", []):
        callee, prefill, _ = call.partition(PREFILL_ONLY)
        if callee.startswith(("self.", "?")):
            continue
        for need in helper_needs(index, where, callee, depth + 1):
            needs.append(need if PREFILL_ONLY in need or not prefill else need + PREFILL_ONLY)
    return needs


def resolve_function(index: Any, module: str, ref: str) -> tuple[str, dict[str, Any]] | None:
    """(module, facts) of the module-level function `ref` names, through the imports."""
    facts = index.module_facts(module)
    if facts is None:
        return None
    if "." not in ref and ref in facts.get("functions", {}):
        return module, facts["functions"][ref]
    head, _, rest = ref.rpartition(".")
    if head:  # ``utils.split(...)``: a module attribute
        target = index.resolve_dotted(module, head)
        if target is not None and target.kind == "module":
            return resolve_function(index, target.module, rest)
        return None
    imported = facts["imports"].get(ref)
    if imported is None or imported[2] is None:
        return None
    level, source, attr = imported
    base = index.import_base(module, level, source)
    if base in index.modules and base != module:
        return resolve_function(index, base, attr)
    return None


def method_table(index: Any, target: Any, info: dict[str, Any], own: dict[str, list[str]]) -> None:
    """Add to `own` (method → needs, the class's own and inherited) what each method of
    `info` needs through the helpers it hands the record to; drop the helper methods (those
    a sibling hands the record to), which are not entry points."""
    calls = info.get("cam_calls", {})
    base = {m: list(v) for m, v in own.items()}

    def total(method: str, depth: int) -> list[str]:
        needs = list(base.get(method, []))
        for call in calls.get(method, []) if depth <= _DEPTH else []:
            if call.startswith("?"):
                continue
            callee, prefill, _ = call.partition(PREFILL_ONLY)
            if callee.startswith("self.") and callee.count(".") == 2:
                continue  # another object's method: reached, not required
            if callee.startswith("self."):
                found = total(callee[5:], depth + 1)
            else:
                found = helper_needs(index, target.module, callee)
            needs += [n if PREFILL_ONLY in n or not prefill else n + PREFILL_ONLY for n in found]
        return needs

    for method in calls:
        own[method] = total(method, 0)
    for method_calls in calls.values():
        for call in method_calls:
            callee = call.lstrip("?").partition(PREFILL_ONLY)[0]
            if callee.startswith("self._") and callee.count(".") == 1:
                own.pop(callee[5:], None)  # a private helper; a public method stays an entry
