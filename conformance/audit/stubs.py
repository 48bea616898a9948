"""Stub audit: layer stubs judged against the builders they reach; ``object.__new__``
stand-ins judged against the methods used on them.

*Layer stubs* are values stored into a ``static_forward_context`` (`shapes`):
``SimpleNamespace``/dict stubs, instances of ad-hoc classes (defined in test or benchmark
code, or in the storing file) and ``object.__new__`` stand-ins of tree classes. An instance
of a core class of the tree (the real layer) or of a class outside it is the real thing;
a stand-in of a core class that is not an ``AttentionLayerBase`` (a fused-MoE layer, say)
is a non-attention layer: neither is a layer stub.

A layer stub is judged against the *builders it reaches*: tree classes whose methods take
layers out of a context (`usage.layer_reads`), named in the storing function (else its
file), directly or as what a named backend's ``get_builder_cls`` returns or a registry
enum member names. A stub reaching no builder is not judged. Reads through
``get_layers_from_vllm_config(cfg, Type)`` count only for stubs of a ``Type`` subclass.
With a protocol (``--protocol FILE``), every layer stub is judged against it instead.

*Stand-ins* ``x = object.__new__(Cls)`` skip ``__init__``: the attributes the methods
called on ``x`` (and ``x``'s direct reads) use, that ``Cls``'s methods would set, must be
set on ``x`` afterwards or exist at class level (STUB004).
"""

from __future__ import annotations

from typing import Any

from conformance.audit.findings import Finding, join_names
from conformance.audit.index import Index, Target
from conformance.audit.protocol import LayerProtocol

LAYER_BASE = "AttentionLayerBase"


def _tree(paths: set[str]) -> dict[str, dict]:
    tree: dict[str, dict] = {}
    for path in sorted(paths):
        node = tree
        for part in path.split("."):
            node = node.setdefault(part, {})
    return tree


def _missing(shape: dict[str, Any], required: dict[str, dict], prefix: str = "") -> list[str]:
    missing: list[str] = []
    for name, children in sorted(required.items()):
        if name not in shape["attrs"]:
            missing.append(prefix + name)
        elif children and name in shape["values"]:
            inner = shape["values"][name]
            if inner["kind"] == "mapping" and not inner["unpacked"]:
                missing += _missing(inner, children, f"{prefix}{name}.")
    return missing


class StubJudge:
    """Judges the stubs of one index."""

    def __init__(self, index: Index, protocol: LayerProtocol | None) -> None:
        self.index = index
        self.protocol = protocol
        self.judged = 0
        self.unreached = 0

    def run(self) -> list[Finding]:
        findings: list[Finding] = []
        for number, facts in self.index.loaded():
            module = (self.index.names_of[number] or [""])[0]
            for store in facts["stores"]:
                findings += self._store(number, module, facts, store)
            for standin in facts["standins"]:
                findings += self._standin(number, module, standin)
        return findings

    def _finding(
        self, number: int, shape: dict, code: str, message: str, names: list[str]
    ) -> Finding:
        entry = self.index.entries[number]
        lines = [
            shape["line"],
            shape["end"],
            shape.get("store") or shape["line"],
            shape.get("store_end") or 0,
        ]
        span = (min(x for x in lines if x), max(lines))
        return Finding(
            entry.display,
            shape["line"],
            shape["col"],
            code,
            message,
            tuple(names),
            shape["q"],
            file=entry.path,
            relpath=entry.relpath,
            span=span,
        )

    def _classify(
        self, number: int, module: str, shape: dict
    ) -> tuple[Target | None, set[str], str | None] | None:
        """(class, attributes, why unknown) of a layer stub; None when not a stub."""
        if shape["kind"] == "mapping":
            return None, set(shape["attrs"]), None
        target = self.index.resolve_dotted(module, shape["cls"])
        if target is None or target.kind != "class":
            return None  # a factory, a mock, a class outside the tree: not audited
        defined_in = self.index.modules.get(target.module)
        support = defined_in is not None and self.index.entries[defined_in].is_support
        instance = shape["kind"] == "instance"
        if instance and not (support or defined_in == number):
            return None  # the real layer
        if not instance and not support and not self.index.is_subclass(target, LAYER_BASE):
            return None  # a non-attention layer of the engine
        attrs, unknown = self.index.attributes(target, instance=instance)
        return target, attrs | set(shape["attrs"]), unknown

    def _requirements(
        self, number: int, module: str, facts: dict, shape: dict, target: Target | None
    ) -> tuple[set[str], list[str]] | None:
        if self.protocol is not None:
            return set(self.protocol.attributes), [self.protocol.source]
        builders = self.index.reached(module, facts["refs"].get(shape["q"], []), "layer")
        builders = builders or self.index.reached(module, facts["refs"].get("<file>", []), "layer")
        if not builders:
            return None
        paths: set[str] = set()
        for builder in builders:
            for reads in self.index.by_method(builder, "layer").values():
                for path, kind in reads:
                    if kind is None or (
                        target is not None
                        and self.index.is_subclass(target, kind.rsplit(".", 1)[-1])
                    ):
                        paths.add(path)
        return paths, [b.name for b in builders]

    def _store(self, number: int, module: str, facts: dict, shape: dict) -> list[Finding]:
        classified = self._classify(number, module, shape)
        if classified is None:
            return []
        target, attrs, unknown = classified
        needed = self._requirements(number, module, facts, shape, target)
        if needed is None:
            self.unreached += 1
            return []
        self.judged += 1
        paths, builders = needed
        stored = "stored in static_forward_context"
        if shape["store"] != shape["line"]:
            stored += f" at line {shape['store']}"
        where = f"layer stub {shape['label']} {stored} in {shape['q']}"
        against = f"(read by {join_names(sorted(set(builders)))})"
        findings: list[Finding] = []
        if unknown is None:
            missing = _missing({**shape, "attrs": attrs}, _tree(paths))
            if missing and shape["unpacked"]:
                findings.append(
                    self._finding(
                        number,
                        shape,
                        "STUB002",
                        f"{where} is built with **mapping, so the audit cannot verify that "
                        f"it has {join_names(missing)} {against}",
                        missing,
                    )
                )
            elif missing:
                note = " (__init__ never runs)" if shape["kind"] == "standin" else ""
                findings.append(
                    self._finding(
                        number,
                        shape,
                        "STUB001",
                        f"{where} lacks {join_names(missing)}{note} {against}",
                        missing,
                    )
                )
        if unknown is None and (target is None or not self.index.is_subclass(target, LAYER_BASE)):
            findings.append(
                self._finding(
                    number,
                    shape,
                    "STUB003",
                    f"{where} is not an {LAYER_BASE} subclass: type-filtered layer lookups "
                    "(get_layers_from_vllm_config) skip it silently",
                    [LAYER_BASE],
                )
            )
        return findings

    def _standin(self, number: int, module: str, shape: dict) -> list[Finding]:
        if shape["init"] or shape["var"] is None:
            return []
        target = self.index.resolve_dotted(module, shape["cls"])
        if target is None or target.kind != "class":
            return []
        class_level, unknown = self.index.attributes(target, instance=False)
        if unknown is not None:
            return []
        full, _ = self.index.attributes(target, instance=True)
        settable = full - class_level
        used = set(shape["reads"])
        pending, seen, provided = list(shape["calls"]), set(), set()
        while pending and len(seen) < 50:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in shape["attrs"]:
                continue  # replaced on the instance (a mock): its body never runs
            method, _ = self.index.method_self(target, name)
            if method is not None:
                used |= set(method["reads"])
                provided |= set(method["sets"])
                pending += method["calls"]
        missing = sorted((used & settable) - class_level - set(shape["attrs"]) - provided)
        if not missing:
            return []
        calls = f" before calling {join_names(shape['calls'])}" if shape["calls"] else ""
        message = (
            f"stand-in {shape['label']} in {shape['q']} lacks {join_names(missing)}{calls} "
            f"(__init__ never runs; {target.name}'s methods set them)"
        )
        return [self._finding(number, shape, "STUB004", message, missing)]
