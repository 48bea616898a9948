"""Which builders (or record consumers) a stub or a construction site reaches, and why.

A scope reaches the classes with `table` facts (builders: ``layer``; consumers: ``cam``)
that it names, or that the module-level names it uses are bound to; else those its callees
in the same file name (a test's fixtures, named by its parameters, count as callees); else
those its callers (and their other callees) name, nearest first. A name reaches a class

* directly (``MLACommonMetadataBuilder``); ``Cls.method`` reaches that method only (a
  static helper handed the record is not charged with the class's other methods);
* as what a named backend's ``get_builder_cls`` returns (no other method is followed: a
  config class whose parser returns the registry enum reaches nothing);
* as the backend a registry-enum member names (``AttentionBackendEnum.ROCM_AITER_MLA``);
* as *every* backend of a registry enum named whole (``AttentionBackendEnum[name]``): the
  builder is chosen at run time, and each candidate is judged on its own (`choice`);
* as every member of an engine's registry of builders (SGLang's ``ATTENTION_BACKENDS``,
  `EngineSites.registries`), keyed by the names measured facts give: chosen at run time too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from conformance.audit.index import Index, Target

_MAX_HOPS = 4


@dataclass(frozen=True)
class Reached:
    """One class reached, and the chain of names that reaches it (for the message)."""

    target: Target
    how: str
    method: str | None = None
    """Only this method (``Cls.method`` named), else every method."""
    runtime: bool = False
    """One candidate of a registry enum named whole: chosen at run time."""


def _expand(
    index: Index,
    target: Target,
    table: str,
    how: str,
    found: dict[str, Reached],
    runtime: bool,
    depth: int,
) -> None:
    if depth > 3 or target.key in found:
        return
    if index.consumes(target, table):
        found[target.key] = Reached(target, how, None, runtime)
        return
    info = index.class_facts(target)
    if info is None:
        return
    for method, refs in info["returns"].items():
        if method not in index.sites.builder_getters:
            continue
        for ref in refs:
            returned = index.resolve_dotted(target.module, ref)
            if returned is not None and returned.kind == "class" and returned != target:
                step = f"{how} → {target.name}.{method}()"
                _expand(index, returned, table, step, found, runtime, depth + 1)
    if depth == 0 and info["members"]:  # a registry enum named whole: every member
        for member in info["members"].values():
            named = index.resolve_absolute(member)
            if named is not None and named.kind == "class" and named != target:
                step = f"{how} (any member, chosen at run time)"
                _expand(index, named, table, step, found, True, depth + 1)


def from_refs(
    index: Index, module: str, refs: Iterable[str], table: str, where: str
) -> list[Reached]:
    """The classes `refs` (dotted names loaded in `where`) reach."""
    found: dict[str, Reached] = {}
    for ref in refs:
        members = index.registries.get(index.qualified(module, ref)) if index.registries else None
        if members is not None:
            how = f"{ref} named in {where} (any member, chosen at run time)"
            for member in members:
                named = index.resolve_absolute(member)
                if named is not None and named.kind == "class":
                    _expand(index, named, table, how, found, True, 1)
            continue
        target = index.resolve_dotted(module, ref)
        if target is None or target.kind != "class":
            continue
        last = ref.rsplit(".", 1)[-1]
        if (
            last != target.name.rsplit(".", 1)[-1]
            and index.consumes(target, table)
            and index.method_self(target, last)[0] is not None
        ):
            key = f"{target.key}.{last}"
            if key not in found and target.key not in found:
                found[key] = Reached(target, f"{ref} named in {where}", last)
            continue
        _expand(index, target, table, f"{ref} named in {where}", found, False, 0)
    direct = {r.target.key for r in found.values() if r.method is None}
    return [r for r in found.values() if r.method is None or r.target.key not in direct]


class ScopeGraph:
    """The functions of one file, the names each loads, and who calls whom."""

    def __init__(self, facts: dict[str, Any]) -> None:
        self.refs: dict[str, list[str]] = facts["refs"]
        self.globals: dict[str, list[str]] = facts.get("globals", {})
        self.params: dict[str, list[str]] = facts.get("params", {})
        self.callees: dict[str, set[str]] = {q: self._callees(q) for q in self.refs}

    def names(self, qualname: str) -> list[str]:
        """The dotted names `qualname` loads, module-level names expanded to their values."""
        return [r for refs in self.origins(qualname).values() for r in refs]

    def origins(self, qualname: str) -> dict[str, list[str]]:
        """Where each name `qualname` loads is written: the scope itself, or a module-level
        name it uses (``BUILDER = Enum.MEMBER.get_builder_cls()``)."""
        own = self.refs.get(qualname, [])
        found = {qualname: own}
        for name in own:
            head = name.split(".", 1)[0]
            if head in self.globals and qualname != "<module>":
                found[f"module-level {head}, used in {qualname}"] = self.globals[head]
        return found

    def _callees(self, qualname: str) -> set[str]:
        owner = qualname.rsplit(".", 1)[0] if "." in qualname else None
        found = {p for p in self.params.get(qualname, ()) if p in self.refs and p != qualname}
        for ref in self.refs.get(qualname, []):
            head, _, rest = ref.partition(".")
            candidates = [ref, f"{qualname}.<locals>.{ref}"]
            if head in ("self", "cls") and owner and rest:
                candidates.append(f"{owner}.{rest.split('.', 1)[0]}")
            found |= {c for c in candidates if c in self.refs and c != qualname}
        return found

    def closure(self, start: set[str]) -> set[str]:
        """`start` and everything it calls, transitively."""
        seen, pending = set(), list(start)
        while pending:
            current = pending.pop()
            if current not in seen:
                seen.add(current)
                pending += self.callees.get(current, ())
        return seen

    def rings(self, qualname: str) -> Iterable[set[str]]:
        """The scopes to look in, nearest first: the scope and its callees; then its callers
        and their callees; then theirs."""
        seen = self.closure({qualname})
        yield seen
        frontier = {qualname}
        for _ in range(_MAX_HOPS):
            callers = {q for q, called in self.callees.items() if called & frontier} - seen
            if not callers:
                return
            ring = self.closure(callers) - seen
            seen |= ring
            frontier = callers
            yield ring


def reached_from(
    index: Index, module: str, facts: dict[str, Any], qualname: str, table: str
) -> list[Reached]:
    """What the scope `qualname` of a file reaches (module docstring), nearest first."""
    graph = ScopeGraph(facts)
    for ring in graph.rings(qualname):
        found: dict[str, Reached] = {}
        for scope in sorted(ring, key=lambda q: (q != qualname, q)):
            for origin, refs in graph.origins(scope).items():
                where = origin if scope == qualname else f"{origin}, on {qualname}'s call chain"
                for reached in from_refs(index, module, refs, table, where):
                    found.setdefault(reached.target.key + (reached.method or ""), reached)
        if found:
            return list(found.values())
    return []


def ancestors(index: Index, target: Target) -> list[Target]:
    """`target` and its tree bases, nearest first."""
    order, pending, seen = [], [target], set()
    while pending and len(seen) < 40:
        current = pending.pop(0)
        if current.key in seen:
            continue
        seen.add(current.key)
        order.append(current)
        pending += [r for _, r in index.bases(current) if r is not None and r.kind == "class"]
    return order


def definer(index: Index, target: Target, method: str, table: str, item: str) -> Target:
    """The class whose own `method` reads `item` (a field or a layer path) for `target`:
    itself or the in-tree base it inherits (or ``super()``-calls) that read from."""
    for base in ancestors(index, target):
        info = index.class_facts(base)
        entries = (info or {}).get(table, {}).get(method, [])
        if any((e[0] if isinstance(e, list) else e.split("@", 1)[0]) == item for e in entries):
            return base
    return target
