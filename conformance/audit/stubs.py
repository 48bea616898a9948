"""Static stub audit: layer stand-ins that lack attributes the metadata builders read.

A metadata builder reads attributes (its *layer protocol*, `protocol.LayerProtocol`) from
the layer objects registered in a ``static_forward_context``-like mapping. A test stub
missing one fails only when that builder runs, often on one vendor's CI (vLLM #51255 →
#52139). This audit finds, without running anything:

* **stored stubs**: values stored into a mapping whose name ends in
  ``static_forward_context`` (``ctx[k] = X``; ``ctx = {k: X}``; ``ctx.update({k: X})`` or
  ``ctx.update(k=X)``; ``ctx.setdefault(k, X)``; a keyword argument
  ``static_forward_context={k: X}``; a local name bound to such a mapping, or to a dict
  later assigned to one), where ``X`` is ``SimpleNamespace(...)``, a dict literal or
  ``dict(...)``, an instance of an *ad-hoc* class (defined in the audited tree, in the
  same file or in test or benchmark code, see `is_support_file`; instances of library
  classes are the real thing and not audited), an ``object.__new__(Cls)`` stand-in, or
  a local name bound to one of those in the same function (attributes set afterwards with
  ``x.attr = ...`` or ``setattr(x, "attr", ...)`` in that function count);
* **stand-ins** ``object.__new__(Cls)`` (or ``Cls.__new__(Cls)``) anywhere: ``__init__``
  never runs, so only ``Cls``'s class-level names and attributes set afterwards count
  (vLLM #51011). ``object.__new__`` is a common test idiom for unrelated classes, so a
  stand-in is audited only when ``Cls`` is a class of the tree whose full instances have a
  protocol attribute, or, when its attributes cannot all be known (defined outside the
  tree, or with a base outside it), when its name contains attention, attn, MLA, layer or
  impl; a stand-in later passed to ``Cls.__init__(obj, ...)`` is a full instance and is
  not audited.

Attributes of a class defined in the tree: class-level assignments and annotations, methods
and properties, ``self.x = ...`` in its methods, and the same for its in-tree base classes.
A class with a base outside the tree (other than ``object``, ``ABC``, ``Generic``,
``Protocol``, ``NamedTuple``, ``nn.Module`` and ``AttentionLayerBase``, which add no protocol
attribute) or with ``__getattr__`` is *trusted*: not reported. Values of any other shape
(factory calls, mocks, parameters) are not audited.

Findings: STUB001 a stored stub lacks attributes; STUB002 a stub built with ``**mapping``
cannot be verified and may lack some; STUB003 (warning) a stored stub is not an
``AttentionLayerBase`` subclass, so type-filtered lookups skip it silently; STUB004 a
stand-in lacks attributes. A dotted path ``a.b`` needs ``a``; ``b`` is checked too when
``a``'s value is itself a stub the audit can read.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from conformance.audit.findings import MISSING, UNVERIFIABLE, WARNING, Finding, join_names
from conformance.audit.protocol import LayerProtocol, default_protocol
from conformance.audit.tree import (
    PathArgs,
    Scope,
    SourceFile,
    SourceTree,
    as_tree,
    constant_str,
    iter_scopes,
    terminal_name,
)

CONTEXT_SUFFIX = "static_forward_context"
LAYER_BASE = "AttentionLayerBase"
# Bases outside the tree known to add no protocol attribute.
NEUTRAL_BASES: frozenset[str] = frozenset(
    {"object", "ABC", "Generic", "Protocol", "NamedTuple", "Module", LAYER_BASE}
)
_MAX_DEPTH = 6
_SUPPORT_FOLDERS = frozenset({"tests", "test", "benchmarks"})
_RELEVANT_CLASS_NAME = re.compile(r"attention|attn|mla|layer|impl", re.IGNORECASE)


# ---------------------------------------------------------------------------- classes


@dataclass
class ClassInfo:
    """What a class statement of the tree gives its instances."""

    file: SourceFile
    node: ast.ClassDef
    class_attrs: set[str]
    """Names bound in the class body: values, methods, properties, nested classes."""
    instance_attrs: set[str]
    """Bare annotations and ``self.x`` assignments in methods."""
    bases: list[str | None]
    """Terminal names of the bases (None for a base the audit cannot name)."""
    dynamic: bool
    """Defines ``__getattr__``, sets attributes by computed name, or updates ``__dict__``."""


@dataclass(frozen=True)
class ClassAttributes:
    """The resolved attributes of a class (with its in-tree bases)."""

    attrs: frozenset[str]
    is_layer: bool
    """An ``AttentionLayerBase``-named class is among its bases."""
    unknown: str | None
    """Why the set may be incomplete (out-of-tree base, ``__getattr__``), else None."""


def _class_info(file: SourceFile, node: ast.ClassDef) -> ClassInfo:
    class_attrs: set[str] = set()
    instance_attrs: set[str] = set()
    dynamic = False
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            class_attrs.add(stmt.name)
            if stmt.name in ("__getattr__", "__getattribute__"):
                dynamic = True
            arguments = [*stmt.args.posonlyargs, *stmt.args.args]
            if arguments:
                found, is_dynamic = _attributes_set_on(stmt, arguments[0].arg)
                instance_attrs |= found
                dynamic = dynamic or is_dynamic
        elif isinstance(stmt, ast.ClassDef):
            class_attrs.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                class_attrs |= _target_names(target)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            (class_attrs if stmt.value is not None else instance_attrs).add(stmt.target.id)
    bases = [terminal_name(b) for b in node.bases]
    return ClassInfo(file, node, class_attrs, instance_attrs, bases, dynamic)


def _target_names(target: ast.AST) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(e) for e in target.elts)) if target.elts else set()
    return set()


def _attributes_set_on(scope_node: ast.AST, name: str) -> tuple[set[str], bool]:
    """Attributes assigned on `name` anywhere inside `scope_node`, and whether some are
    set by a computed name (``setattr(x, key, v)``, ``x.__dict__.update``)."""
    found: set[str] = set()
    dynamic = False
    for node in ast.walk(scope_node):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == name
        ):
            found.add(node.attr)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
                target, key = node.args[0], node.args[1]
                if isinstance(target, ast.Name) and target.id == name:
                    if constant_str(key) is None:
                        dynamic = True
                    else:
                        found.add(constant_str(key))  # type: ignore[arg-type]
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "update"
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "__dict__"
                and isinstance(func.value.value, ast.Name)
                and func.value.value.id == name
            ):
                dynamic = True
    return found, dynamic


class ClassIndex:
    """Every class statement of a tree, by name."""

    def __init__(self, tree: SourceTree) -> None:
        self._tree = tree
        self._by_name: dict[str, list[ClassInfo]] = {}

    def named(self, name: str) -> list[ClassInfo]:
        """The class statements called `name` (files are searched on first use)."""
        if name not in self._by_name:
            needle = f"class {name}"
            self._by_name[name] = [
                _class_info(file, node)
                for file in self._tree.files
                if needle in file.text
                for node in ast.walk(file.module)
                if isinstance(node, ast.ClassDef) and node.name == name
            ]
        return self._by_name[name]

    def lookup(self, name: str, file: SourceFile) -> list[ClassInfo]:
        """Classes called `name`: those of `file` if it has one, else all of the tree."""
        candidates = self.named(name)
        local = [c for c in candidates if c.file is file]
        return local or list(candidates)

    def resolve(self, name: str, file: SourceFile, *, instance: bool) -> ClassAttributes | None:
        """The attributes an instance (or, with ``instance=False``, a bare
        ``object.__new__`` stand-in) of class `name` has; None if the tree has no such
        class. With several classes of that name, their attributes are united."""
        candidates = self.lookup(name, file)
        if not candidates:
            return None
        results = [self._resolve(c, instance=instance, seen=set()) for c in candidates]
        unknown = next((r.unknown for r in results if r.unknown), None)
        return ClassAttributes(
            attrs=frozenset().union(*(r.attrs for r in results)),
            is_layer=any(r.is_layer for r in results),
            unknown=unknown,
        )

    def _resolve(self, info: ClassInfo, *, instance: bool, seen: set[int]) -> ClassAttributes:
        seen.add(id(info))
        attrs = set(info.class_attrs)
        if instance:
            attrs |= info.instance_attrs
        is_layer = False
        unknown = f"class {info.node.name} defines __getattr__" if info.dynamic else None
        for base in info.bases:
            if base is None:
                unknown = unknown or f"class {info.node.name} has a computed base class"
                continue
            is_layer = is_layer or base == LAYER_BASE
            candidates = [c for c in self.lookup(base, info.file) if id(c) not in seen]
            if candidates:
                for candidate in candidates:
                    sub = self._resolve(candidate, instance=instance, seen=seen)
                    attrs |= sub.attrs
                    is_layer = is_layer or sub.is_layer
                    unknown = unknown or sub.unknown
            elif base not in NEUTRAL_BASES:
                unknown = unknown or f"base class {base} is not in the audited tree"
        return ClassAttributes(frozenset(attrs), is_layer, unknown)


# ---------------------------------------------------------------------------- scope facts


@dataclass
class _ScopeFacts:
    """Bindings and attribute stores of one scope, for resolving local names."""

    scope: Scope
    bindings: dict[str, list[tuple[int, ast.expr]]] = field(default_factory=dict)
    attr_sets: dict[str, list[tuple[int, str, ast.expr | None]]] = field(default_factory=dict)
    context_aliases: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, scope: Scope) -> _ScopeFacts:
        facts = cls(scope)
        bindings: dict[str, list[tuple[int, ast.expr]]] = defaultdict(list)
        attr_sets: dict[str, list[tuple[int, str, ast.expr | None]]] = defaultdict(list)
        for node in scope.nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    facts._note_target(target, node.value, node.lineno, bindings, attr_sets)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                facts._note_target(node.target, node.value, node.lineno, bindings, attr_sets)
            elif isinstance(node, ast.AugAssign):
                facts._note_target(node.target, None, node.lineno, {}, attr_sets)
            elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                bindings[node.target.id].append((node.lineno, node.value))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name)
                and constant_str(node.args[1]) is not None
            ):
                value = node.args[2] if len(node.args) > 2 else None
                attr_sets[node.args[0].id].append(
                    (node.lineno, constant_str(node.args[1]), value)  # type: ignore[arg-type]
                )
        facts.bindings = dict(bindings)
        facts.attr_sets = dict(attr_sets)
        # Names bound to a static_forward_context, or assigned to one.
        for name, values in facts.bindings.items():
            if any(_names_context(v) for _, v in values):
                facts.context_aliases.add(name)
        for node in scope.nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Name):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(_names_context(t) for t in targets):
                    facts.context_aliases.add(node.value.id)
        return facts

    @staticmethod
    def _note_target(
        target: ast.AST,
        value: ast.expr | None,
        line: int,
        bindings: dict[str, list[tuple[int, ast.expr]]],
        attr_sets: dict[str, list[tuple[int, str, ast.expr | None]]],
    ) -> None:
        if isinstance(target, ast.Name) and value is not None:
            bindings.setdefault(target.id, []).append((line, value))
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            attr_sets.setdefault(target.value.id, []).append((line, target.attr, value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                _ScopeFacts._note_target(element, None, line, {}, attr_sets)

    def binding_before(self, name: str, line: int) -> tuple[int, ast.expr] | None:
        """The last binding of `name` at or before `line` (else the first after it)."""
        values = self.bindings.get(name)
        if not values:
            return None
        before = [b for b in values if b[0] <= line]
        return before[-1] if before else values[0]

    def is_context(self, node: ast.AST) -> bool:
        """Whether `node` names a static_forward_context-like mapping in this scope."""
        if isinstance(node, ast.Name) and node.id in self.context_aliases:
            return True
        return _names_context(node)


def _names_context(node: ast.AST) -> bool:
    name = terminal_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return name is not None and name.endswith(CONTEXT_SUFFIX)


# ---------------------------------------------------------------------------- stub shapes


@dataclass
class StubShape:
    """A stub value the audit can read."""

    label: str
    """How messages name it: ``SimpleNamespace(...)``, ``FakeLayer(...)``, ..."""
    node: ast.AST
    """Where it is created (the reported line)."""
    attrs: set[str]
    values: dict[str, ast.expr] = field(default_factory=dict)
    unpacked: bool = False
    """Built with ``**mapping``: further attributes may exist."""
    is_layer: bool | None = False
    """Known to subclass AttentionLayerBase (True), known not to (False), unknown (None)."""
    trusted: str | None = None
    """Why the shape is not checked (out-of-tree base, ``__getattr__``), else None."""
    standin: bool = False
    """An ``object.__new__`` stand-in."""


class _StubReader:
    """Turns expressions of one file into `StubShape`s."""

    def __init__(self, file: SourceFile, classes: ClassIndex) -> None:
        self.file = file
        self.classes = classes
        self.namespace_names = {"SimpleNamespace"}
        for node in ast.walk(file.module):
            if isinstance(node, ast.ImportFrom):
                self.namespace_names.update(
                    a.asname for a in node.names if a.name == "SimpleNamespace" and a.asname
                )

    def read(
        self, expr: ast.AST, facts: _ScopeFacts, line: int, depth: int = 0
    ) -> StubShape | None:
        """The stub `expr` evaluates to (names resolved in `facts` as of `line`), or None."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, ast.Dict):
            return self._mapping("dict literal", expr, _dict_entries(expr), [])
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, ast.Name):
            binding = facts.binding_before(expr.id, line)
            if binding is None:
                return None
            bound_line, value = binding
            shape = self.read(value, facts, bound_line, depth + 1)
            if shape is None:
                return None
            for set_line, attr, attr_value in facts.attr_sets.get(expr.id, []):
                if set_line >= bound_line:
                    shape.attrs.add(attr)
                    if attr_value is not None:
                        shape.values[attr] = attr_value
            return shape
        return None

    def _call(self, call: ast.Call) -> StubShape | None:
        func = call.func
        name = terminal_name(func)
        if (isinstance(func, ast.Name) and func.id in self.namespace_names) or (
            isinstance(func, ast.Attribute) and func.attr == "SimpleNamespace"
        ):
            entries = [(ast.Constant(k.arg), k.value) for k in call.keywords if k.arg]
            spreads = [k.value for k in call.keywords if k.arg is None] + list(call.args)
            return self._mapping("SimpleNamespace(...)", call, entries, spreads)
        if isinstance(func, ast.Name) and func.id == "dict":
            entries = [(ast.Constant(k.arg), k.value) for k in call.keywords if k.arg]
            spreads = [k.value for k in call.keywords if k.arg is None] + list(call.args)
            return self._mapping("dict(...)", call, entries, spreads)
        standin = _standin_class(call)
        if standin is not None:
            return self._class_shape(standin, call, instance=False)
        if name is not None and isinstance(func, (ast.Name, ast.Attribute)):
            return self._class_shape(name, call, instance=True)
        return None

    def _mapping(
        self,
        label: str,
        node: ast.AST,
        entries: list[tuple[ast.expr | None, ast.expr]],
        spreads: list[ast.expr],
    ) -> StubShape:
        shape = StubShape(label, node, set())
        for key, value in entries:
            if key is None:  # {**x}
                spreads.append(value)
                continue
            text = constant_str(key)
            if text is None:
                shape.unpacked = True
                continue
            shape.attrs.add(text)
            shape.values[text] = value
        for spread in spreads:
            if isinstance(spread, ast.Dict):
                inner = self._mapping(label, node, _dict_entries(spread), [])
                shape.attrs |= inner.attrs
                shape.values.update(inner.values)
                shape.unpacked = shape.unpacked or inner.unpacked
            else:
                shape.unpacked = True
        return shape

    def _class_shape(self, name: str, call: ast.Call, *, instance: bool) -> StubShape | None:
        if instance and not any(
            c.file is self.file or is_support_file(c.file.relpath)
            for c in self.classes.lookup(name, self.file)
        ):
            return None  # a factory, a mock, an imported or a library class: not audited
        resolved = self.classes.resolve(name, self.file, instance=instance)
        label = f"{name}(...)" if instance else f"object.__new__({name})"
        if resolved is None:
            return StubShape(label, call, set(), is_layer=None, standin=True)
        trusted = resolved.unknown if instance else None
        if not instance and resolved.unknown and "__getattr__" in resolved.unknown:
            trusted = resolved.unknown
        return StubShape(
            label,
            call,
            set(resolved.attrs),
            is_layer=True if resolved.is_layer else (None if resolved.unknown else False),
            trusted=trusted,
            standin=not instance,
        )


def is_support_file(relpath: str) -> bool:
    """Whether `relpath` is test or benchmark code, where ad-hoc layer classes live: under a
    ``tests``, ``test`` or ``benchmarks`` folder, or named ``test_*.py``, ``*_test.py`` or
    ``conftest.py``."""
    *folders, name = relpath.split("/")
    return (
        any(f in _SUPPORT_FOLDERS for f in folders)
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def _dict_entries(node: ast.Dict) -> list[tuple[ast.expr | None, ast.expr]]:
    return list(zip(node.keys, node.values, strict=True))


def _standin_class(call: ast.Call) -> str | None:
    """``Cls`` for ``object.__new__(Cls)`` or ``Cls.__new__(Cls)``, else None."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "__new__" and len(call.args) == 1):
        return None
    owner = terminal_name(func.value) if isinstance(func.value, ast.Name) else None
    cls = (
        terminal_name(call.args[0]) if isinstance(call.args[0], (ast.Name, ast.Attribute)) else None
    )
    if owner is None or cls is None or cls == "cls":
        return None
    if owner == "object" or owner == cls:
        return cls
    return None


# ---------------------------------------------------------------------------- stores


def _stored_values(node: ast.AST, facts: _ScopeFacts) -> Iterator[ast.expr]:
    """Values `node` stores into a static_forward_context-like mapping."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and facts.is_context(target.value):
                yield node.value
            elif _names_context(target):
                yield from _mapping_values(node.value, facts, node.lineno)
    elif isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and facts.is_context(func.value):
            if func.attr == "update":
                for arg in node.args:
                    yield from _mapping_values(arg, facts, node.lineno)
                yield from (k.value for k in node.keywords if k.arg)
            elif func.attr == "setdefault" and len(node.args) == 2:
                yield node.args[1]
        for keyword in node.keywords:
            if keyword.arg and keyword.arg.endswith(CONTEXT_SUFFIX):
                yield from _mapping_values(keyword.value, facts, node.lineno)


def _mapping_values(
    node: ast.AST, facts: _ScopeFacts, line: int, depth: int = 0
) -> Iterator[ast.expr]:
    if isinstance(node, ast.Dict):
        yield from (v for k, v in zip(node.keys, node.values, strict=True) if k is not None)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        yield from (k.value for k in node.keywords if k.arg)
        for arg in node.args:
            yield from _mapping_values(arg, facts, line, depth + 1)
    elif isinstance(node, ast.Name) and depth < _MAX_DEPTH:
        binding = facts.binding_before(node.id, line)
        if binding is not None and not _names_context(binding[1]):
            yield from _mapping_values(binding[1], facts, binding[0], depth + 1)


# ---------------------------------------------------------------------------- checking


def _missing(
    shape: StubShape,
    requirements: dict[str, dict],
    reader: _StubReader,
    facts: _ScopeFacts,
    prefix: str = "",
    depth: int = 0,
) -> list[str]:
    missing: list[str] = []
    for name, children in sorted(requirements.items()):
        if name not in shape.attrs:
            missing.append(prefix + name)
        elif children and name in shape.values and depth < _MAX_DEPTH:
            value = shape.values[name]
            inner = reader.read(value, facts, getattr(value, "lineno", 0), depth + 1)
            if inner is not None and inner.trusted is None and not inner.unpacked:
                missing += _missing(inner, children, reader, facts, f"{prefix}{name}.", depth + 1)
    return missing


def audit_stubs(
    tree: SourceTree | PathArgs,
    protocol: LayerProtocol | None = None,
    *,
    exclude: Sequence[str] = (),
) -> list[Finding]:
    """Findings for every layer stub and ``object.__new__`` stand-in in `tree` (a parsed
    tree, or path(s) to load), checked against `protocol` (default: `default_protocol()`).

    Files that do not parse are skipped here; `run_audit` reports them. Lines carrying
    ``# conformance-audit: ignore[CODE]`` drop that code.
    """
    tree = as_tree(tree, exclude)
    if protocol is None:
        protocol = default_protocol()
    classes = ClassIndex(tree)
    requirements = protocol.requirement_tree()
    findings: list[Finding] = []
    for file in tree.files:
        if CONTEXT_SUFFIX not in file.text and "__new__" not in file.text:
            continue  # nothing this file does can be a stored stub or a stand-in
        reader = _StubReader(file, classes)
        audited: set[int] = set()
        for scope in iter_scopes(file.module):
            facts = _ScopeFacts.build(scope)
            for node in scope.nodes:
                for value in _stored_values(node, facts):
                    shape = reader.read(value, facts, getattr(node, "lineno", 0))
                    if shape is None or id(shape.node) in audited:
                        continue
                    audited.add(id(shape.node))
                    findings += _check(file, scope, shape, node, requirements, reader, facts)
            for node in scope.nodes:
                if isinstance(node, ast.Call) and id(node) not in audited:
                    cls = _standin_class(node)
                    if cls is None or _inside_new(scope):
                        continue
                    if not _standin_relevant(cls, file, classes, requirements):
                        continue
                    shape = _standin_with_sets(node, scope, facts, reader)
                    if shape is None:
                        continue
                    audited.add(id(node))
                    findings += _check(file, scope, shape, None, requirements, reader, facts)
    return findings


def _inside_new(scope: Scope) -> bool:
    return scope.qualname.rsplit(".", 1)[-1] == "__new__"


def _standin_relevant(
    cls: str, file: SourceFile, classes: ClassIndex, requirements: dict[str, dict]
) -> bool:
    """Whether a stand-in of `cls` stands for an object the protocol is about: a class
    of the tree whose full instances have a protocol attribute, or (when its attributes
    cannot all be known) a class whose name says attention, layer, MLA or impl."""
    resolved = classes.resolve(cls, file, instance=True)
    if resolved is not None and resolved.attrs.intersection(requirements):
        return True
    return (resolved is None or resolved.unknown is not None) and bool(
        _RELEVANT_CLASS_NAME.search(cls)
    )


def _standin_with_sets(
    call: ast.Call, scope: Scope, facts: _ScopeFacts, reader: _StubReader
) -> StubShape | None:
    """The stand-in `call` creates, with the attributes later set through its name;
    None when ``Cls.__init__(obj, ...)`` later turns it into a full instance."""
    for name, bindings in facts.bindings.items():
        for line, value in bindings:
            if value is call:
                if _initialised_later(name, scope):
                    return None
                return reader.read(ast.Name(name, ast.Load()), facts, line)
    return reader.read(call, facts, call.lineno)


def _initialised_later(name: str, scope: Scope) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__init__"
        and node.args
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == name
        for node in scope.nodes
    )


def _check(
    file: SourceFile,
    scope: Scope,
    shape: StubShape,
    store: ast.AST | None,
    requirements: dict[str, dict],
    reader: _StubReader,
    facts: _ScopeFacts,
) -> list[Finding]:
    line = getattr(shape.node, "lineno", 0)
    end_line = getattr(shape.node, "end_lineno", line) or line
    store_line = getattr(store, "lineno", line)
    first, last = min(line, store_line), max(end_line, getattr(store, "end_lineno", 0) or 0)
    if store is None:
        where = f"stand-in {shape.label} in {scope.qualname}"
        code = "STUB004"
    else:
        stored = "stored in static_forward_context"
        if store_line != line:
            stored += f" at line {store_line}"
        where = f"layer stub {shape.label} {stored} in {scope.qualname}"
        code = "STUB001"

    def finding(kind: str, code: str, message: str, names: list[str]) -> Finding | None:
        if file.suppressed(code, first, last):
            return None
        return Finding(
            path=file.display,
            line=line,
            col=getattr(shape.node, "col_offset", 0),
            kind=kind,
            code=code,
            message=message,
            names=tuple(names),
            qualname=scope.qualname,
        )

    results: list[Finding | None] = []
    if shape.trusted is None:
        missing = _missing(shape, requirements, reader, facts)
        if missing and shape.unpacked:
            results.append(
                finding(
                    UNVERIFIABLE,
                    "STUB002",
                    f"{where} is built with **mapping, so the audit cannot verify that it has "
                    f"{join_names(missing)}",
                    missing,
                )
            )
        elif missing:
            note = ""
            if shape.standin:
                note = " (__init__ never runs; only class-level names and attributes set "
                note += "afterwards count)"
            results.append(
                finding(MISSING, code, f"{where} lacks {join_names(missing)}{note}", missing)
            )
    if store is not None and shape.is_layer is False:
        results.append(
            finding(
                WARNING,
                "STUB003",
                f"{where} is not an {LAYER_BASE} subclass: type-filtered layer lookups "
                "(get_layers_from_vllm_config) skip it silently",
                [LAYER_BASE],
            )
        )
    return [r for r in results if r is not None]
