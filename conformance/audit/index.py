"""Cross-file resolution: modules, import-aware names, classes, builders and consumers.

Every file is importable under the dotted names `tree.module_names` gives it. A name is
resolved through its module's symbol table (classes defined there, ``import``,
``from ... import ... as ...``, relative imports, top-level aliases, star imports, and
re-exports through ``__init__``); a name that cannot be resolved is not guessed (None).
A class's string members that spell a dotted path (``ROCM_AITER_MLA = "pkg.mod.Backend"``,
the registry-enum idiom) resolve to that class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.audit.handoffs import method_table
from conformance.audit.loader import load_one
from conformance.audit.sites import VLLM, EngineSites
from conformance.audit.tree import FileEntry, module_names

NEUTRAL_BASES = frozenset(
    {"object", "ABC", "Generic", "Protocol", "NamedTuple", "Module", "AttentionLayerBase"}
)
_DEPTH = 12


@dataclass(frozen=True)
class Target:
    """What a name resolves to: a class or module of the tree, or an outside name."""

    kind: str
    """class, module or external."""
    module: str
    """The module's dotted name (for external: the full dotted name)."""
    name: str = ""
    """The class's qualname."""

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}" if self.name else self.module


class Index:
    """The modules of one audit and their facts (extracted lazily when not anchored)."""

    def __init__(
        self,
        entries: list[FileEntry],
        facts: list[Any],
        cap: int,
        cache_dir: str | None,
        sites: EngineSites = VLLM,
    ) -> None:
        self.sites = sites
        """The engine whose record, builders and layers the facts describe."""
        self.registries: dict[str, tuple[str, ...]] = {}
        """A registry of the engine (`EngineSites.registries`) → the dotted classes of its
        members, as measured facts name them (empty without facts)."""
        self.entries = entries
        self._facts: list[Any] = facts
        self._cap = cap
        self._cache = cache_dir
        self.late_problems: list[Any] = []
        self.modules: dict[str, int] = {}
        self.names_of: list[list[str]] = []
        packages: set[str] = set()
        for number, entry in enumerate(entries):
            names = module_names(entry, packages)
            self.names_of.append(names)
            for name in names:
                self.modules.setdefault(name, number)
        self._by_relpath = {entry.relpath: n for n, entry in enumerate(entries)}
        self._memo: dict[tuple[str, str], Target | None] = {}
        self._methods: dict[tuple[str, str], dict[str, Any]] = {}

    def facts(self, number: int) -> dict[str, Any]:
        """The facts of file `number`, extracted now if they were left for later."""
        value = self._facts[number]
        if value is None:
            entry = self.entries[number]
            job = (entry.path, entry.display, True, self._cap, self._cache, self.sites.engine)
            _, value = load_one(job)
            if not isinstance(value, dict):
                self.late_problems.append(value)
                value = {"imports": {}, "stars": [], "aliases": {}, "classes": {}}
            self._facts[number] = value
        return value

    def module_facts(self, module: str) -> dict[str, Any] | None:
        number = self.modules.get(module)
        return None if number is None else self.facts(number)

    def loaded(self) -> list[tuple[int, dict[str, Any]]]:
        """The files whose facts were extracted in the first pass."""
        return [(n, f) for n, f in enumerate(self._facts) if isinstance(f, dict) and "sites" in f]

    # ------------------------------------------------------------------ names

    def _absolute(self, module: str, level: int, target: str) -> str:
        if level == 0:
            return target
        number = self.modules.get(module)
        is_package = number is not None and self.entries[number].relpath.endswith("__init__.py")
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
        return ".".join([*parts, target] if target else parts)

    def resolve_name(self, module: str, name: str, depth: int = 0) -> Target | None:
        """What `name` means at the top level of `module`."""
        key = (module, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # cycles resolve to nothing
        result = self._resolve_name(module, name, depth)
        self._memo[key] = result
        return result

    def _resolve_name(self, module: str, name: str, depth: int) -> Target | None:
        facts = self.module_facts(module)
        if facts is None or depth > _DEPTH:
            return None
        if name in facts["classes"]:
            return Target("class", module, name)
        imported = facts["imports"].get(name)
        if imported is not None:
            level, source, attr = imported
            base = (self._script_sibling(module, source) if level == 0 else None) or (
                self._absolute(module, level, source)
            )
            if attr is None:
                return Target("module", base) if base in self.modules else Target("external", base)
            full = f"{base}.{attr}" if base else attr
            if full in self.modules:
                return Target("module", full)
            if base in self.modules:
                return self.resolve_name(base, attr, depth + 1)
            return Target("external", full)
        alias = facts["aliases"].get(name)
        if alias is not None:
            return self.resolve_dotted(module, alias, depth + 1)
        for level, source in facts["stars"]:
            base = self._absolute(module, level, source)
            if base in self.modules:
                found = self.resolve_name(base, name, depth + 1)
                if found is not None:
                    return found
        return None

    def qualified(self, module: str, ref: str) -> str:
        """The absolute dotted name `ref` spells in `module`: its first name through the
        module's imports, else a name of the module itself."""
        first, _, rest = ref.partition(".")
        imported = (self.module_facts(module) or {}).get("imports", {}).get(first)
        if imported is None:
            full = f"{module}.{first}"
        else:
            level, source, attr = imported
            base = self.import_base(module, level, source)
            full = f"{base}.{attr}" if attr else base
        return f"{full}.{rest}" if rest else full

    def import_base(self, module: str, level: int, source: str) -> str:
        """The module ``from <level dots><source> import ...`` in `module` names."""
        return (self._script_sibling(module, source) if level == 0 else None) or (
            self._absolute(module, level, source)
        )

    def _script_sibling(self, module: str, source: str) -> str | None:
        """The module a script-style import (``from common import X`` in a script run with
        its own folder first on ``sys.path``: a folder without ``__init__.py``, or test and
        benchmark code) names: the sibling file, when there is one."""
        number = self.modules.get(module)
        if number is None or not source:
            return None
        entry = self.entries[number]
        folder = entry.relpath.rpartition("/")[0]
        prefix = f"{folder}/" if folder else ""
        if f"{prefix}__init__.py" in self._by_relpath and not entry.is_support:
            return None  # a package module: its imports are absolute
        stem = prefix + source.replace(".", "/")
        for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
            found = self._by_relpath.get(candidate)
            if found is not None and self.names_of[found]:
                return self.names_of[found][-1]
        return None

    def resolve_dotted(self, module: str, ref: str, depth: int = 0) -> Target | None:
        """The longest resolvable prefix of dotted `ref` as seen from `module`."""
        first, *rest = ref.split(".")
        current = self.resolve_name(module, first, depth)
        for part in rest:
            if current is None:
                return None
            step = self._step(current, part, depth)
            if step is None:
                return current
            current = step
        return current

    def _step(self, current: Target, part: str, depth: int) -> Target | None:
        if current.kind == "external":
            return Target("external", f"{current.module}.{part}")
        if current.kind == "module":
            sub = f"{current.module}.{part}"
            if sub in self.modules:
                return Target("module", sub)
            return self.resolve_name(current.module, part, depth + 1)
        info = self.class_facts(current)
        if info is None:
            return None
        nested = f"{current.name}.{part}"
        if nested in (self.module_facts(current.module) or {}).get("classes", {}):
            return Target("class", current.module, nested)
        member = info["members"].get(part)
        return self.resolve_absolute(member) if member else None

    def resolve_scoped(self, module: str, scope: str, ref: str) -> Target | None:
        """`ref` as seen from inside the function or class `scope` (a qualname) of `module`:
        a class defined in that function or an enclosing one (``f.<locals>.Stub``) first,
        then the module's top-level names."""
        classes = (self.module_facts(module) or {}).get("classes", {})
        first, _, rest = ref.partition(".")
        parts = scope.split(".") if scope and scope != "<module>" else []
        while parts:
            head = ".".join(parts)
            for candidate in (f"{head}.<locals>.{first}", f"{head}.{first}"):
                if candidate in classes and candidate != scope:
                    current: Target | None = Target("class", module, candidate)
                    for part in rest.split(".") if rest else []:
                        step = self._step(current, part, 0) if current else None
                        if step is None:
                            return current
                        current = step
                    return current
            parts.pop()
            if parts and parts[-1] == "<locals>":
                parts.pop()
        return self.resolve_dotted(module, ref)

    def resolve_absolute(self, dotted_path: str) -> Target | None:
        """A fully qualified ``pkg.mod.Name`` (string members, registry entries)."""
        parts = dotted_path.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if module in self.modules:
                return self.resolve_dotted(module, ".".join(parts[cut:]))
        return Target("external", dotted_path)

    # ------------------------------------------------------------------ classes

    def class_facts(self, target: Target) -> dict[str, Any] | None:
        if target.kind != "class":
            return None
        facts = self.module_facts(target.module)
        return None if facts is None else facts["classes"].get(target.name)

    def bases(self, target: Target) -> list[tuple[str | None, Target | None]]:
        """(written base, what it resolves to) for each base of a tree class."""
        info = self.class_facts(target)
        if info is None:
            return []
        outer = target.name.rpartition(".")[0]
        if outer.endswith(".<locals>"):
            outer = outer[: -len(".<locals>")]
        return [
            (b, self.resolve_scoped(target.module, outer, b) if b else None) for b in info["bases"]
        ]

    def is_subclass(
        self, target: Target, base_name: str, seen: frozenset[str] = frozenset()
    ) -> bool:
        """Whether `target` has a base whose last name is `base_name` (through tree bases)."""
        if target.key in seen or len(seen) > _DEPTH:
            return False
        if target.name.rsplit(".", 1)[-1] == base_name or target.module.endswith("." + base_name):
            return True
        for written, resolved in self.bases(target):
            if written and written.rsplit(".", 1)[-1] == base_name:
                return True
            if resolved is not None and self.is_subclass(resolved, base_name, seen | {target.key}):
                return True
        return False

    def attributes(self, target: Target, *, instance: bool) -> tuple[set[str], str | None]:
        """The attributes an instance (or a bare ``object.__new__`` stand-in) has, and why
        that set may be incomplete (a base outside the tree, ``__getattr__``), else None."""
        attrs: set[str] = set()
        unknown: str | None = None
        stack, seen = [target], set()
        while stack:
            current = stack.pop()
            if current.key in seen:
                continue
            if len(seen) > 4 * _DEPTH:
                unknown = unknown or "the inheritance chain is too deep to follow"
                break
            seen.add(current.key)
            info = self.class_facts(current)
            if info is None:
                unknown = unknown or f"base {current.module} is not in the audited tree"
                continue
            attrs |= set(info["cattrs"])
            if instance:
                attrs |= set(info["iattrs"])
            if info["dynamic"]:
                unknown = unknown or f"class {current.name} sets attributes dynamically"
            for written, resolved in self.bases(current):
                if resolved is not None and resolved.kind == "class":
                    stack.append(resolved)
                elif written is None or written.rsplit(".", 1)[-1] not in NEUTRAL_BASES:
                    unknown = unknown or f"base {written} is not in the audited tree"
        return attrs, unknown

    def by_method(
        self, target: Target, table: str, seen: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """Method → facts of `table` (``layer`` reads or ``cam`` needs), inherited from tree
        bases for methods the class does not override (or overrides calling ``super()``)."""
        memo = (target.key, table)
        if memo in self._methods:
            return self._methods[memo]
        info = self.class_facts(target)
        if info is None or target.key in seen or len(seen) > _DEPTH:
            return {}
        result = dict(info[table])
        for _, resolved in self.bases(target):
            if resolved is None or resolved.kind != "class":
                continue
            for name, value in self.by_method(resolved, table, seen | {target.key}).items():
                own = info["methods"].get(name)
                if own is None:
                    result.setdefault(name, value)
                elif name in own["super"]:
                    result[name] = [*result.get(name, []), *value]
        if table == "cam":  # what the helpers its methods hand the record to need
            method_table(self, target, info, result)
        self._methods[memo] = result
        return result

    def consumes(self, target: Target, table: str) -> bool:
        """Whether `target` has `table` facts (builders: ``layer``; consumers: ``cam``); a
        consumer of the record must have the engine's `EngineSites.consumer_method` where it
        names one."""
        methods = self.by_method(target, table)
        entry = self.sites.consumer_method if table == "cam" else ""
        return bool(methods) and (not entry or entry in methods)

    def method_self(self, target: Target, name: str) -> tuple[dict[str, Any] | None, Target | None]:
        """The `self_usage` facts of method `name` as `target` resolves it (own, then bases)."""
        stack, seen = [target], set()
        while stack:
            current = stack.pop(0)
            if current.key in seen:
                continue
            seen.add(current.key)
            info = self.class_facts(current)
            if info is None:
                continue
            if name in info["methods"]:
                return info["methods"][name], current
            stack += [r for _, r in self.bases(current) if r is not None and r.kind == "class"]
        return None, None
