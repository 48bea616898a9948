"""Model-runner stubs judged by measured facts (STUB005): an engine whose builders are
constructed over a model runner (SGLang) fails on a test double of the runner, or of its
model config, that lacks what a builder's constructor reads (#52139's shape one level up:
SGLang's MLA test kit's model config without the ``dtype`` ``AiterAttnBackend`` reads).

A stub (`runner_shapes`) is judged when the call it is handed to resolves to measured
builders: a registry of the engine (every measured builder that ran, or the one its
constant key names: a run-time choice) or a class a measured builder is, or derives from.
It lacks a dotted path the facts say a builder *required* (``model_config.dtype``) when it
has no such attribute: a ``SimpleNamespace`` or dict's keys, an ad-hoc class's attributes
(set anywhere in it or its in-tree bases, at class level, or on the stub later), and for a
nested path, the value the stub holds there (a mapping, a later assignment, or the
constructor keyword its ``__init__`` stores: ``self.model_config = model_config``). A
stub whose attributes cannot all be known (a base outside the tree, ``__getattr__``,
attributes set under computed names, ``**mapping``) is not judged at that level; an
instance of a core class of the tree (the engine's real runner) is no stub. Without facts
nothing is judged: the builders' reads of the runner are measured, not read from source.
"""

from __future__ import annotations

from conformance.audit.findings import Finding, join_names
from conformance.audit.index import Index, Target
from conformance.audit.measured import Measured, short
from conformance.audit.reach import ancestors
from conformance.engines.facts import BuilderFacts

_SHOWN = 4


class RunnerStubJudge:
    """Judges the model-runner stubs of one index by measured facts."""

    def __init__(self, index: Index, measured: Measured | None) -> None:
        self.index = index
        self.measured = measured
        self.judged = 0

    def run(self) -> list[Finding]:
        if self.measured is None or not self.index.sites.runner:
            return []
        findings: list[Finding] = []
        for number, facts in self.index.loaded():
            module = (self.index.names_of[number] or [""])[0]
            for stub in facts.get("runner_stubs", ()):
                findings += self._judge(number, module, stub)
        return findings

    # -- which builders --------------------------------------------------------------

    def _builders(self, module: str, stub: dict) -> tuple[list[tuple[str, BuilderFacts]], str]:
        """The measured builders the stub is handed to, and how (for the message)."""
        assert self.measured is not None
        if stub["via"] == "registry":
            if self.index.qualified(module, stub["ref"]) not in self.index.sites.registries:
                return [], ""
            ran = {n: b for n, b in self.measured.facts.builders.items() if b.status != "not-run"}
            key = stub["key"]
            if key is not None:
                return ([(key, ran[key])] if key in ran else []), f"{stub['ref']}[{key!r}]"
            how = f"{stub['ref']}[...] (chosen at run time among the measured builders)"
            return sorted(ran.items()), how
        target = self.index.resolve_scoped(module, stub["q"], stub["ref"])
        if target is None or target.kind != "class":
            return [], ""
        return self.measured.builders(target), stub["ref"]

    # -- what the stub has -----------------------------------------------------------

    def _class_of(self, module: str, q: str, shape: dict) -> Target | None:
        """The ad-hoc class of an instance or stand-in shape (None: not a stub's class)."""
        target = self.index.resolve_scoped(module, q, shape["cls"])
        if target is None or target.kind != "class":
            return None
        defined_in = self.index.modules.get(target.module)
        if defined_in is None:
            return None
        if shape["kind"] == "instance" and not self.index.entries[defined_in].is_support:
            return None if defined_in != self.index.modules.get(module) else target
        return target

    def _attributes(self, module: str, q: str, shape: dict) -> set[str] | None:
        """Every attribute the stub has; None when that set cannot be known."""
        if shape.get("dynamic") or shape.get("unpacked"):
            return None
        if shape["kind"] == "mapping":
            return set(shape["attrs"])
        target = self._class_of(module, q, shape)
        if target is None:
            return None
        attrs, unknown = self.index.attributes(target, instance=shape["kind"] == "instance")
        return None if unknown is not None else attrs | set(shape["attrs"])

    def _value(self, module: str, q: str, shape: dict, name: str) -> dict | None:
        """The shape the stub holds at attribute `name`, where the source says."""
        if name in shape["values"]:
            return shape["values"][name]
        if shape["kind"] != "instance":
            return None
        target = self._class_of(module, q, shape)
        for owner in ancestors(self.index, target) if target is not None else ():
            info = self.index.class_facts(owner) or {}
            if "__init__" in info.get("methods", {}):
                param = info.get("init_params", {}).get(name)
                return shape.get("kwargs", {}).get(param) if param else None
        return None

    def _lacks(self, module: str, q: str, shape: dict, path: str, prefix: str = "") -> str | None:
        """`path` (or the part of it the stub lacks), or None when it has it or cannot tell."""
        head, _, rest = path.partition(".")
        attrs = self._attributes(module, q, shape)
        if attrs is not None and head not in attrs:
            return prefix + path
        if not rest:
            return None
        inner = self._value(module, q, shape, head)
        return self._lacks(module, q, inner, rest, f"{prefix}{head}.") if inner else None

    # -- the finding -----------------------------------------------------------------

    def _judge(self, number: int, module: str, stub: dict) -> list[Finding]:
        builders, how = self._builders(module, stub)
        if not builders:
            return []
        shape = stub["shape"]
        if shape["kind"] != "mapping" and self._class_of(module, stub["q"], shape) is None:
            return []  # the engine's real runner, a class outside the tree, a factory
        self.judged += 1
        missing: dict[str, list[str]] = {}
        errors: dict[str, str] = {}
        for name, builder in builders:
            for path, error in sorted(builder.required.items()):
                lacking = self._lacks(module, stub["q"], shape, path)
                if lacking is not None:
                    missing.setdefault(lacking, []).append(name)
                    errors.setdefault(lacking, f"{name} without {path}: {short(error)}")
        if not missing:
            return []
        names = sorted(missing)
        need = sorted({b for path in names for b in missing[path]})
        fine = sorted({n for n, _ in builders} - set(need))
        reason = f"{join_names(need)} (measured) {'needs' if len(need) == 1 else 'need'} it"
        if len(builders) > 1:
            reason += f" ({len(need)} of the {len(builders)} measured builders it may get)"
        if fine:
            shown = fine[:_SHOWN] + ([f"{len(fine) - _SHOWN} more"] if len(fine) > _SHOWN else [])
            reason += f"; fine for {join_names(shown)}"
        entry = self.index.entries[number]
        message = (
            f"model-runner stub {shape['label']} handed to {how} in {stub['q']} lacks "
            f"{join_names(names)} ({reason}; measured: {errors[names[0]]})"
        )
        return [
            Finding(
                entry.display,
                stub["line"],
                stub["col"],
                "STUB005",
                message,
                tuple(names),
                stub["q"],
                file=entry.path,
                relpath=entry.relpath,
                span=(min(shape["line"] or stub["line"], stub["line"]), stub["end"]),
            )
        ]
