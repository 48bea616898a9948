"""Model-runner stubs (STUB005): an engine whose builders are constructed over a model
runner (SGLang) fails on a test double of the runner, or of its model config, that lacks what
a builder's constructor reads (#52139's shape one level up: SGLang's MLA test kit's model
config without the ``dtype`` ``AiterAttnBackend`` reads).

A stub (`runner_shapes`) is judged against the builders the call it is handed to resolves
to: a registry of the engine (a run-time choice among every builder it holds, or the one its
constant key names) or a class. Measured facts take precedence: with them a registry holds
the measured builders that ran, and a class the measured builders that are it or derive
from it, each requiring the dotted paths the facts say (``model_config.dtype``). Without
facts a registry holds the classes its registering functions construct
(`runner_reads.registered_builders`); a class no measured builder maps to, or any class
without facts, requires what its constructor reads from the runner on every path
(`runner_reads.init_runner_reads`, through the bases it hands the runner to).

A stub lacks a path when it has no such attribute: a ``SimpleNamespace`` or dict's keys, an
ad-hoc class's attributes (set anywhere in it or its in-tree bases, at class level, or on
the stub later), and for a nested path, the value the stub holds there (a mapping, a later
assignment, or the constructor keyword its ``__init__`` stores: ``self.model_config =
model_config``). A stub whose attributes cannot all be known (a base outside the tree,
``__getattr__``, attributes set under computed names, ``**mapping``) is not judged at that
level; an instance of a core class of the tree (the engine's real runner) is no stub.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.audit.findings import Finding, join_names
from conformance.audit.index import Index, Target
from conformance.audit.measured import Measured, short
from conformance.audit.reach import ancestors
from conformance.engines.facts import BuilderFacts

_SHOWN = 4


@dataclass(frozen=True)
class _Builder:
    """One builder a stub may be handed to, and the runner paths it requires: by measured
    facts (path → the error its absence raised) or statically (path → the method reading it)."""

    name: str
    required: dict[str, str]
    measured: bool


class RunnerStubJudge:
    """Judges the model-runner stubs of one index: by measured facts where they map to the
    builders the stub is handed to, else by what those builders' constructors read."""

    def __init__(self, index: Index, measured: Measured | None) -> None:
        self.index = index
        self.measured = measured
        self.judged = 0

    def run(self) -> list[Finding]:
        if not self.index.sites.runner:
            return []
        findings: list[Finding] = []
        for number, facts in self.index.loaded():
            module = (self.index.names_of[number] or [""])[0]
            for stub in facts.get("runner_stubs", ()):
                findings += self._judge(number, module, stub)
        return findings

    # -- which builders --------------------------------------------------------------

    def _builders(self, module: str, stub: dict) -> tuple[list[_Builder], str]:
        """The builders the stub is handed to, and how (for the message)."""
        key = stub["key"]
        if stub["via"] == "registry":
            registry = self.index.qualified(module, stub["ref"])
            if registry not in self.index.sites.registries:
                return [], ""
            if self.measured is not None:
                ran = {
                    n: b for n, b in self.measured.facts.builders.items() if b.status != "not-run"
                }
                if key is not None:
                    found = [_measured(key, ran[key])] if key in ran else []
                    return found, f"{stub['ref']}[{key!r}]"
                how = f"{stub['ref']}[...] (chosen at run time among the measured builders)"
                return [_measured(n, b) for n, b in sorted(ran.items())], how
            classes = registered(self.index, registry, key)
            found = [_Builder(c.name, self._reads(c), False) for c in classes]
            if key is not None:
                return found, f"{stub['ref']}[{key!r}]"
            how = f"{stub['ref']}[...] (chosen at run time among the backends it registers)"
            return found, how
        target = self.index.resolve_scoped(module, stub["q"], stub["ref"])
        if target is None or target.kind != "class":
            return [], ""
        ran = self.measured.builders(target) if self.measured is not None else []
        if ran:
            return [_measured(n, b) for n, b in ran], stub["ref"]
        return [_Builder(target.name, self._reads(target), False)], stub["ref"]

    def _reads(self, target: Target, depth: int = 0) -> dict[str, str]:
        """Path → the constructor reading it, for what `target`'s ``__init__`` (its own or
        inherited) reads from its runner on every path, with the bases it hands it to."""
        _, owner = self.index.method_self(target, "__init__")
        info = (self.index.class_facts(owner) or {}).get("runner") if owner else None
        if owner is None or not info or depth > 4:
            return {}
        reader = f"{owner.name.rsplit('<locals>.', 1)[-1]}.__init__"
        found = {path: reader for path in info["reads"]}
        if info["super"]:
            for _, base in self.index.bases(owner):
                if base is not None and base.kind == "class":
                    for path, by in self._reads(base, depth + 1).items():
                        found.setdefault(path, by)
        return found

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
        why: dict[str, list[str]] = {}
        for builder in builders:
            for path, reason in sorted(builder.required.items()):
                lacking = self._lacks(module, stub["q"], shape, path)
                if lacking is not None:
                    missing.setdefault(lacking, []).append(builder.name)
                    if builder.measured:
                        reason = f"measured: {builder.name} without {path}: {short(reason)}"
                    why.setdefault(lacking, []).append(reason)
        if not missing:
            return []
        names = sorted(missing)
        message = (
            f"model-runner stub {shape['label']} handed to {how} in {stub['q']} lacks "
            f"{join_names(names)} ({_reason(builders, missing, why)})"
        )
        entry = self.index.entries[number]
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


def _measured(name: str, builder: BuilderFacts) -> _Builder:
    return _Builder(name, dict(builder.required), True)


def _reason(
    builders: list[_Builder], missing: dict[str, list[str]], why: dict[str, list[str]]
) -> str:
    """Who needs what the stub lacks, those it is fine for, and one error or the readers."""
    names = sorted(missing)
    need = sorted({b for path in names for b in missing[path]})
    fine = sorted({b.name for b in builders} - set(need))
    measured = all(b.measured for b in builders)
    readers = sorted({r for path in names for r in why[path]}) if not measured else []
    text = f"read by {join_names(readers)}; " if readers else ""
    kind = "measured builders" if measured else "builders"
    text += f"{join_names(need)}{' (measured)' if measured else ''} "
    text += f"{'needs' if len(need) == 1 else 'need'} it"
    if len(builders) > 1:
        text += f" ({len(need)} of the {len(builders)} {kind} it may get)"
    if fine:
        shown = fine[:_SHOWN] + ([f"{len(fine) - _SHOWN} more"] if len(fine) > _SHOWN else [])
        text += f"; fine for {join_names(shown)}"
    return text + (f"; {why[names[0]][0]}" if measured else "")


def registered(index: Index, registry: str, key: str | None) -> list[Target]:
    """The classes the registering functions of `registry` (a dotted module-level name)
    construct: under `key`, or under every key (`runner_reads.registered_builders`)."""
    module = registry.rpartition(".")[0]
    table = (index.module_facts(module) or {}).get("registered") or {}
    functions = [table["keys"][key]] if key in table.get("keys", {}) else []
    if key is None:
        functions = sorted(set(table.get("keys", {}).values()))
    found: dict[str, Target] = {}
    seen: set[str] = set()
    while functions and len(seen) < 200:
        function = functions.pop()
        if function in seen:
            continue
        seen.add(function)
        for callee in table["returns"].get(function, []):
            if callee in table["returns"]:
                functions.append(callee)  # another registering function's result
                continue
            target = index.resolve_dotted(module, callee)
            if target is not None and target.kind == "class":
                found.setdefault(target.key, target)
    return sorted(found.values(), key=lambda t: t.name)
