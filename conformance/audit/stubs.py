"""Stub audit: layer stubs judged against the builders they reach; ``object.__new__``
stand-ins judged against the methods used on them.

*Layer stubs* are values stored into the engine's layer context (`shapes`; vLLM's
``static_forward_context``), or handed to a builder's forward method (SGLang's
``backend.forward_decode(q, k, v, layer, forward_batch)``: judged by that method only):
``SimpleNamespace``/dict stubs, instances of ad-hoc classes (defined in test or benchmark
code, or in the storing file) and ``object.__new__`` stand-ins of tree classes. An instance
of a core class of the tree (the real layer) or of a class outside it is the real thing;
a stand-in of a core class that is not an ``AttentionLayerBase`` (a fused-MoE layer, say)
is a non-attention layer: neither is a layer stub.

A layer stub is judged against the *builders it reaches* (`reach`): tree classes whose
methods take layers out of a context (`usage.layer_reads`). A builder chosen at run time
from a registry enum is judged by each candidate the stub is written for (`choice`).
A stub reaching no builder is not judged; neither are the bodies of methods the test
replaces, nor first-layer reads for a later layer. Reads through
``get_layers_from_vllm_config(cfg, Type)`` count only for stubs of a ``Type`` subclass.
With a protocol (``--protocol FILE``), every layer stub is judged against it instead; with
measured facts (`measured`), by what the real builders were seen to require.

*Stand-ins* ``x = object.__new__(Cls)`` skip ``__init__``: the attributes the methods
called on ``x`` (and ``x``'s direct reads) use, that ``Cls``'s methods would set, must be
set on ``x`` afterwards or exist at class level (STUB004). A method replaced on ``x``
(``x.m = ...``, ``patch.object(x, "m")``) or on ``Cls`` (``patch.object(Cls, "m")``,
`StubJudge._patched`) never runs; a ``types.MethodType(f, x)`` replacement sets what ``f``
sets.
"""

from __future__ import annotations

from typing import Any

from conformance.audit.choice import RunTimeChoice, picked
from conformance.audit.findings import Finding, join_names
from conformance.audit.index import Index, Target
from conformance.audit.measured import Measured
from conformance.audit.protocol import LayerProtocol
from conformance.audit.reach import ScopeGraph, ancestors, definer, reached_from


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

    def __init__(
        self, index: Index, protocol: LayerProtocol | None, measured: Measured | None = None
    ) -> None:
        self.index = index
        self.protocol = protocol
        self.measured = measured
        self.judged = 0
        self.unreached = 0

    def run(self) -> list[Finding]:
        findings: list[Finding] = []
        for number, facts in self.index.loaded():
            module = (self.index.names_of[number] or [""])[0]
            for store in facts["stores"]:
                findings += self._store(number, module, facts, store)
            for standin in facts["standins"]:
                findings += self._standin(number, module, facts, standin)
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
        target = self.index.resolve_scoped(module, shape["q"], shape["cls"])
        if target is None or target.kind != "class":
            return None  # a factory, a mock, a class outside the tree: not audited
        defined_in = self.index.modules.get(target.module)
        support = defined_in is not None and self.index.entries[defined_in].is_support
        instance = shape["kind"] == "instance"
        if instance and not (support or defined_in == number):
            return None  # the real layer
        layer = self.index.sites.layer
        if not instance and not support and not self.index.is_subclass(target, layer):
            return None  # a non-attention layer of the engine
        attrs, unknown = self.index.attributes(target, instance=instance)
        return target, attrs | set(shape["attrs"]), unknown

    def _patched(self, module: str, facts: dict, qualname: str) -> set[tuple[str, str]]:
        """(class key, method or ``*``) replaced in the stub's scope, its callers and callees,
        or at module level: their bodies never run there."""
        if not facts["patched"]:
            return set()
        graph = ScopeGraph(facts)
        scopes = {"<module>"} | set().union(*list(graph.rings(qualname))[:2])
        found: set[tuple[str, str]] = set()
        for scope in scopes:
            for ref, method, absolute in facts["patched"].get(scope, []):
                owner = (
                    self.index.resolve_absolute(ref)
                    if absolute
                    else self.index.resolve_dotted(module, ref)
                )
                if owner is not None and owner.kind == "class":
                    found.add((owner.key, method))
        return found

    def _reads(
        self,
        builder: Target,
        only: str | None,
        shape: dict,
        target: Target | None,
        patched: set[tuple[str, str]],
        needs: dict[str, set[str]],
    ) -> None:
        """Add what `builder` (its method `only`, else all) requires of this stub."""
        keys = {a.key for a in ancestors(self.index, builder)}
        for method, reads in self.index.by_method(builder, "layer").items():
            if only is not None and method != only:
                continue
            if any(k in keys and m in (method, "*") for k, m in patched):
                continue  # replaced by the test: its body never runs
            for path, kind, scope in reads:
                reader = f"{definer(self.index, builder, method, 'layer', path).name}.{method}"
                if scope == "first" and not shape.get("first", True):
                    continue  # read from the group's first layer only
                if kind is None or (
                    target is not None and self.index.is_subclass(target, kind.rsplit(".", 1)[-1])
                ):
                    needs.setdefault(path, set()).add(reader)

    def _examples(self, module: str, facts: dict, shape: dict, missing: list[str]) -> list[str]:
        """One measured error for the missing attributes, when the facts hold one."""
        method = shape.get("method")
        for one in reached_from(self.index, module, facts, shape["q"], "layer"):
            for target in (one.target, *ancestors(self.index, one.target)):
                text = self.measured.example(target, missing, method) if self.measured else ""
                if text:
                    return [f"measured: {text}"]
        return []

    def _requirements(
        self,
        module: str,
        facts: dict,
        shape: dict,
        target: Target | None,
        attrs: set[str],
    ) -> tuple[dict[str, set[str]], dict[str, Any]] | None:
        """Required path → who reads it, and reader → why it is reached; None when the
        stub reaches no builder."""
        if self.protocol is not None:
            source = self.protocol.source
            return {p: {source} for p in self.protocol.attributes}, {source: f"protocol {source}"}
        reached = reached_from(self.index, module, facts, shape["q"], "layer")
        handed = shape.get("method")  # the builder method the layer is handed to
        if handed is not None:
            reached = [r for r in reached if handed in self.index.by_method(r.target, "layer")]
        if not reached:
            return None
        patched = self._patched(module, facts, shape["q"])
        needs: dict[str, set[str]] = {}
        why: dict[str, Any] = {}
        first = shape.get("first", True)
        judged = False

        def judge(
            builder: Target, methods: list[str | None], reason: Any, into: dict[str, set[str]]
        ) -> None:
            if handed is not None:
                methods = [handed]
            measured = self.measured and self.measured.stub_needs(builder, first, into, handed)
            if not measured:
                for method in methods:
                    self._reads(builder, method, shape, target, patched, into)
            for readers in into.values():
                for reader in readers:
                    why.setdefault(reader, reason)

        for one in reached:
            if not one.runtime:
                judge(one.target, [one.method], one.how, needs)
                judged = True
        runtime = [r for r in reached if r.runtime]
        candidates, _ = picked(self.index, runtime, [(shape["line"], attrs)])
        if candidates:
            choice = RunTimeChoice(runtime, len(candidates), "it", "builders")
            for candidate in candidates:
                own: dict[str, set[str]] = {}
                judge(candidate.target, [None], choice, own)
                choice.add(candidate, own)
                for path, readers in own.items():
                    needs.setdefault(path, set()).update(readers)
            judged = True
        return (needs, why) if judged else None

    def _store(self, number: int, module: str, facts: dict, shape: dict) -> list[Finding]:
        classified = self._classify(number, module, shape)
        if classified is None:
            return []
        target, attrs, unknown = classified
        if shape.get("dynamic"):
            unknown = "attributes set under computed names"
        needed = self._requirements(module, facts, shape, target, attrs)
        if needed is None:
            self.unreached += 1
            return []
        self.judged += 1
        needs, why = needed
        sites = self.index.sites
        stored = f"stored in {sites.layer_context}"
        if shape.get("method"):
            stored = f"handed to {shape['method']}"
        if shape["store"] != shape["line"]:
            stored += f" at line {shape['store']}"
        where = f"layer stub {shape['label']} {stored} in {shape['q']}"
        findings: list[Finding] = []
        if unknown is None:
            missing = _missing({**shape, "attrs": attrs}, _tree(set(needs)))
            readers = sorted(
                {r for m in missing for r in needs.get(m, needs.get(m.split(".")[0], ()))}
            )
            reasons = list(
                dict.fromkeys(
                    why[r].why(missing) if isinstance(why[r], RunTimeChoice) else why[r]
                    for r in readers
                )
            )
            seen = self._examples(module, facts, shape, missing) if self.measured else []
            against = f"(read by {join_names(readers)}; {''.join(s + '; ' for s in seen)}"
            against += f"reached: {'; '.join(reasons)})"
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
        layer = sites.layer
        if not sites.typed_lookup:
            return findings  # no type-filtered lookup skips a stub of another type
        if unknown is None and (target is None or not self.index.is_subclass(target, layer)):
            findings.append(
                self._finding(
                    number,
                    shape,
                    "STUB003",
                    f"{where} is not an {layer} subclass: type-filtered layer lookups "
                    f"({sites.typed_lookup}) skip it silently",
                    [layer],
                )
            )
        return findings

    def _standin(self, number: int, module: str, facts: dict, shape: dict) -> list[Finding]:
        if shape["init"] or shape["var"] is None or shape.get("dynamic"):
            return []  # initialised, unused, or given attributes under computed names
        target = self.index.resolve_scoped(module, shape["q"], shape["cls"])
        if target is None or target.kind != "class":
            return []
        class_level, unknown = self.index.attributes(target, instance=False)
        if unknown is not None:
            return []
        full, _ = self.index.attributes(target, instance=True)
        settable = full - class_level
        keys = {a.key for a in ancestors(self.index, target)}
        patched = {m for k, m in self._patched(module, facts, shape["q"]) if k in keys}
        used = set(shape["reads"])
        pending, seen, provided = list(shape["calls"]), set(), set()
        while pending and len(seen) < 50:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in shape["attrs"]:  # replaced on the instance: its body never runs
                provided |= set(shape.get("replaced", {}).get(name, ()))  # its replacement's
                continue
            if name in patched or "*" in patched:
                continue  # replaced on the class (``patch.object(Cls, "m")``)
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
            f"(__init__ never runs; {target.name.rsplit('<locals>.', 1)[-1]}'s methods set them)"
        )
        return [self._finding(number, shape, "STUB004", message, missing)]
