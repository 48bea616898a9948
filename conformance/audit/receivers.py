"""The receivers of a transformed record: which consumers ``cam.unpadded(...)``'s result
can reach, and what they need.

A transformation (a method of the record class that rebuilds it) loses the fields it
leaves out for whoever receives the new record, and only for them. In each core file that
calls it (`flow.record_value_flows`), its result is followed by the local it is bound to:
to the callees it is handed to there or anywhere in the file under that name (returned,
unpacked, passed on), then through the hand-offs of each receiver (`handoffs`), taken or
not (the record *can* reach them): ``self.m`` (a method of the enclosing class),
``self.attr.m`` (``m`` of the classes ``self.attr = Cls(...)`` constructs), ``Cls.m``, or
a module function. A receiver requires what it needs whenever it runs. Nothing is
guessed: a result whose receivers cannot be resolved is judged for the required fields
only, as a construction that reaches no consumer.
"""

from __future__ import annotations

from typing import Any

from conformance.audit.handoffs import resolve_function
from conformance.audit.index import Index, Target
from conformance.audit.measured import Measured
from conformance.audit.reach import ancestors
from conformance.audit.usage import PREFILL_ONLY
from conformance.engines.facts import BATCH_KINDS

_DEPTH = 4


def _enclosing_class(facts: dict[str, Any], scope: str) -> str | None:
    parts = scope.split(".")
    for cut in range(len(parts), 0, -1):
        candidate = ".".join(parts[:cut])
        if candidate in facts["classes"]:
            return candidate
    return None


def _method_info(index: Index, target: Target, method: str) -> tuple[Target, dict] | None:
    """(defining class, its facts) of `method` as `target` resolves it."""
    for base in ancestors(index, target):
        info = index.class_facts(base)
        if info is not None and method in info["methods"]:
            return base, info
    return None


def _attr_classes(index: Index, target: Target, attr: str) -> list[Target]:
    found = []
    for base in ancestors(index, target):
        info = index.class_facts(base) or {}
        for ref in info.get("attr_types", {}).get(attr, []):
            resolved = index.resolve_dotted(base.module, ref)
            if resolved is not None and resolved.kind == "class":
                found.append(resolved)
    return found


class Receivers:
    """Consumers (``Class.method`` or ``function``) a transformed record reaches → needs."""

    def __init__(self, index: Index, measured: Measured | None = None) -> None:
        self.index = index
        self.measured = measured
        self.table: dict[str, list[str]] = {}
        self.seen: set[str] = set()

    def callee(self, module: str, owner: Target | None, callee: str, depth: int) -> None:
        """Follow a hand-off to `callee` (as written in `module`, inside class `owner`)."""
        parts = callee.split(".")
        if parts[0] == "self":
            if owner is None:
                return
            if len(parts) == 2:
                self.method(owner, parts[1], depth)
            elif len(parts) == 3:
                for cls in _attr_classes(self.index, owner, parts[1]):
                    self.method(cls, parts[2], depth)
            return
        head = ".".join(parts[:-1])
        target = self.index.resolve_dotted(module, head) if head else None
        if target is not None and target.kind == "class":
            self.method(target, parts[-1], depth)
            return
        found = resolve_function(self.index, module, callee)
        if found is not None:
            where, info = found
            key = f"{where}.{parts[-1]}"
            if key in self.seen or depth > _DEPTH:
                return
            self.seen.add(key)
            self.table.setdefault(parts[-1], []).extend(info.get("cam", []))
            for call in info.get("calls", []):
                self.callee(where, None, _bare(call), depth + 1)

    def method(self, target: Target, method: str, depth: int) -> None:
        """`target`'s `method` receives the record: what it needs, and where it hands it."""
        key = f"{target.key}.{method}"
        if key in self.seen or depth > _DEPTH:
            return
        self.seen.add(key)
        defined = _method_info(self.index, target, method)
        if defined is None:
            return
        base, info = defined
        if self.measured and self.measured.field_needs(target, BATCH_KINDS, self.table):
            return  # a measured builder: what it was seen to need
        if method not in info["cam"]:
            return  # takes no record: not a consumer
        needs = self.index.by_method(target, "cam").get(method, info["cam"][method])
        self.table.setdefault(f"{base.name}.{method}", []).extend(needs)
        for call in info.get("cam_calls", {}).get(method, []):
            self.callee(base.module, base, _bare(call), depth + 1)


def _bare(call: str) -> str:
    return call.lstrip("?").partition(PREFILL_ONLY)[0]


def transformation_receivers(
    index: Index, method: str, measured: Measured | None = None
) -> tuple[dict[str, list[str]], list[str]] | None:
    """Consumer → the fields it needs, for every consumer the result of the transformation
    `method` reaches, and why; None when no core file calls it. A receiver that maps to
    measured builders (`measured`) needs what they were seen to need."""
    receivers = Receivers(index, measured)
    called_in: list[str] = []
    for number, facts in index.loaded():
        entry = index.entries[number]
        flows = [f for f in facts.get("transforms", []) if f[1] == method]
        if entry.is_support or not flows:
            continue
        called_in.append(entry.relpath)
        module = (index.names_of[number] or [""])[0]
        for scope, _, bound, direct in flows:
            handed = [(scope, c) for c in direct]
            handed += [(s, c) for s, name, c in facts.get("passes", []) if bound and name == bound]
            for where, callee in handed:
                owner_q = _enclosing_class(facts, where)
                owner = Target("class", module, owner_q) if owner_q else None
                receivers.callee(module, owner, callee, 0)
    if not called_in:
        return None
    table = {
        consumer: [f.split(PREFILL_ONLY, 1)[0] for f in fields]
        for consumer, fields in receivers.table.items()
        if fields
    }
    shown = ", ".join(called_in[:2]) + (
        f" and {len(called_in) - 2} more" if len(called_in) > 2 else ""
    )
    reason = (
        f"{index.sites.record}.{method}() is a transformation of the record, called in {shown}; "
        "its result reaches the consumer named"
    )
    return table, [reason]
