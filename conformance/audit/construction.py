"""Construction-site audit: every `CommonAttentionMetadata(...)` call in a source tree.

A *construction site* is a call to ``CommonAttentionMetadata`` by its name, through an
attribute (``backend.CommonAttentionMetadata(...)``) or through an alias bound by
``import ... as`` or a plain ``Alias = CommonAttentionMetadata`` assignment. Each site is
checked against the record's definition:

* the definition is read from the audited tree when it defines a dataclass called
  ``CommonAttentionMetadata`` (so the audit follows a vLLM checkout's own record), else it
  is this suite's `conformance.metadata.record.CommonAttentionMetadata`;
* a site must pass every *needed* field: the fields without a default, plus
  ``seq_lens_cpu_upper_bound`` whenever the definition has it (MLA builders assert it on
  prefill rows: vLLM #40654 → #40844). Passing a literal ``None`` counts as leaving it out;
* a site must not pass a deprecated field: one listed in
  `conformance.metadata.record.DEPRECATED_FIELDS`,
  or a ``_name`` field backing a deprecated ``name`` property of the definition;
* positional arguments fill the fields in declaration order; ``**{"literal": ...}`` dicts are
  read; any other ``*args``/``**kwargs`` makes the site unverifiable, reported only when a
  needed field is not otherwise given.

Constructions of subclasses (``AscendCommonAttentionMetadata``) and copies made with
``dataclasses.replace`` or ``.replace()`` are not construction sites: they keep every field.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from conformance.audit.findings import (
    DEPRECATED,
    INVALID,
    MISSING,
    UNVERIFIABLE,
    WARNING,
    Finding,
    join_names,
)
from conformance.audit.tree import (
    PathArgs,
    SourceFile,
    SourceTree,
    TreeParseError,
    as_tree,
    constant_str,
    iter_scopes,
    terminal_name,
)

CAM_NAME = "CommonAttentionMetadata"

# Needed beyond the definition's required fields, when the definition has them, and why.
BUILDER_NEEDED_REASONS: Mapping[str, str] = {
    "seq_lens_cpu_upper_bound": (
        "MLA builders assert it whenever a prefill row is present; vLLM #40654 → #40844"
    ),
}

_DEPRECATION_WARNINGS = frozenset(
    {"DeprecationWarning", "PendingDeprecationWarning", "FutureWarning"}
)


@dataclass(frozen=True)
class CamDefinition:
    """What a construction site is checked against."""

    fields: tuple[str, ...]
    """Every ``__init__`` parameter, in declaration order."""
    positional: tuple[str, ...]
    """The parameters that may be given positionally, in order."""
    required: frozenset[str]
    """Parameters without a default."""
    deprecated: Mapping[str, str]
    """Deprecated parameter → what to do instead."""
    source: str
    """Where the definition came from: ``path:line`` or ``conformance.metadata.record``."""

    @property
    def needed(self) -> tuple[str, ...]:
        """Required fields plus builder-needed ones the definition has, in field order."""
        return tuple(
            name for name in self.fields if name in self.required or name in BUILDER_NEEDED_REASONS
        )


@dataclass(frozen=True)
class ConstructionSite:
    """One `CommonAttentionMetadata(...)` call."""

    path: str
    """The file as displayed (the audited PATH joined with `relpath`)."""
    relpath: str
    """The file below the audited PATH, ``/``-separated."""
    line: int
    col: int
    end_line: int
    qualname: str
    """The enclosing function or class (``<module>`` at top level), as `__qualname__`."""
    passed: tuple[str, ...]
    """Fields the call gives, positional ones mapped to their names, in call order."""
    passed_none: tuple[str, ...]
    """Fields given as a literal ``None``."""
    unpacked: bool
    """Whether ``*args``/``**kwargs`` hide further arguments."""
    unknown: tuple[str, ...]
    """Keywords the definition does not have."""
    extra_positional: int
    """Positional arguments beyond the positional fields."""
    ignored: frozenset[str] = frozenset()
    """Codes a ``# conformance-audit: ignore[...]`` comment on the call silences (``"*"``
    for a bare ``ignore``): non-empty marks a deliberately broken site (negative control)."""


# ---------------------------------------------------------------------------- definitions


def _conformance_metadata_source() -> ast.Module | None:
    """The parse tree of `conformance.metadata.record`'s source, read without importing it
    (importing it imports torch, which an audit of another tree should not need)."""
    spec = importlib.util.find_spec("conformance.metadata.record")
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        return ast.parse(Path(spec.origin).read_bytes(), filename=spec.origin)
    except (OSError, SyntaxError, ValueError):
        return None


def definition_from_conformance() -> CamDefinition:
    """The definition of this suite's own `CommonAttentionMetadata`.

    Read from its source like any tree's (no torch import); imported only when the source
    is not available.
    """
    module = _conformance_metadata_source()
    if module is not None:
        for node in module.body:
            if isinstance(node, ast.ClassDef) and node.name == CAM_NAME:
                definition = definition_from_class(node, "conformance.metadata.record")
                if definition is not None:
                    return definition
    from conformance.metadata import record as metadata

    init_fields = [f for f in dataclasses.fields(metadata.CommonAttentionMetadata) if f.init]
    required = frozenset(
        f.name
        for f in init_fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    return CamDefinition(
        fields=tuple(f.name for f in init_fields),
        positional=tuple(f.name for f in init_fields if not f.kw_only),
        required=required,
        deprecated=dict(metadata.DEPRECATED_FIELDS),
        source="conformance.metadata.record",
    )


@functools.cache
def our_deprecated_fields() -> Mapping[str, str]:
    """`conformance.metadata.record.DEPRECATED_FIELDS`, read from the source when it is a literal
    (no torch import), else imported."""
    module = _conformance_metadata_source()
    if module is not None:
        for node in module.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == "DEPRECATED_FIELDS" for t in targets):
                try:
                    value = ast.literal_eval(node.value)  # type: ignore[arg-type]
                except ValueError:
                    break
                if isinstance(value, dict):
                    return MappingProxyType(value)
    from conformance.metadata.record import DEPRECATED_FIELDS

    return MappingProxyType(dict(DEPRECATED_FIELDS))


def _is_dataclass_decorator(node: ast.expr) -> tuple[bool, bool]:
    """(is a dataclass decorator, with kw_only=True)."""
    target = node.func if isinstance(node, ast.Call) else node
    if terminal_name(target) != "dataclass":
        return False, False
    kw_only = isinstance(node, ast.Call) and any(
        k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in node.keywords
    )
    return True, kw_only


def _mentions(annotation: ast.AST, name: str) -> bool:
    text = constant_str(annotation)
    if text is not None:
        return name in text
    return any(terminal_name(n) == name for n in ast.walk(annotation))


def _is_deprecated_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    names = [terminal_name(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
    if "property" not in names:
        return False
    if "deprecated" in names:
        return True
    docstring = ast.get_docstring(node) or ""
    if "deprecated" in docstring.lower():
        return True
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and terminal_name(inner.func) == "warn":
            parts = [*inner.args, *(k.value for k in inner.keywords)]
            if any(terminal_name(p) in _DEPRECATION_WARNINGS for p in parts):
                return True
    return False


def definition_from_class(node: ast.ClassDef, source: str) -> CamDefinition | None:
    """Read a dataclass definition from its class statement; None if not a dataclass.

    Fields are the annotated class-level names in order (``ClassVar`` left out, ``InitVar``
    kept, ``field(init=False)`` left out, ``KW_ONLY`` and ``kw_only`` honoured); a field is
    required when it has no default. Base classes are not followed.
    """
    flags = [_is_dataclass_decorator(d) for d in node.decorator_list]
    if not any(is_dc for is_dc, _ in flags):
        return None
    kw_only_all = any(kw for _, kw in flags)
    fields: list[str] = []
    positional: list[str] = []
    required: set[str] = set()
    kw_only_from_here = kw_only_all
    deprecated_properties: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _is_deprecated_property(stmt):
                deprecated_properties.add(stmt.name)
            continue
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        if _mentions(stmt.annotation, "ClassVar"):
            continue
        if terminal_name(stmt.annotation) == "KW_ONLY":
            kw_only_from_here = True
            continue
        name = stmt.target.id
        has_default = stmt.value is not None
        kw_only = kw_only_from_here
        if isinstance(stmt.value, ast.Call) and terminal_name(stmt.value.func) == "field":
            options = {k.arg: k.value for k in stmt.value.keywords if k.arg}
            init = options.get("init")
            if isinstance(init, ast.Constant) and init.value is False:
                continue
            has_default = "default" in options or "default_factory" in options
            flag = options.get("kw_only")
            if isinstance(flag, ast.Constant) and isinstance(flag.value, bool):
                kw_only = flag.value
        fields.append(name)
        if not kw_only:
            positional.append(name)
        if not has_default:
            required.add(name)
    deprecated: dict[str, str] = {}
    for name in fields:
        if name.startswith("_") and name[1:] in deprecated_properties:
            deprecated[name] = f"backing store of the deprecated property {name[1:]!r}"
    for name, hint in our_deprecated_fields().items():
        deprecated[name] = hint
    return CamDefinition(
        fields=tuple(fields),
        positional=tuple(positional),
        required=frozenset(required),
        deprecated=deprecated,
        source=source,
    )


@dataclass(frozen=True)
class ResolvedDefinition:
    """The definition an audit uses, and the warnings its choice produced."""

    definition: CamDefinition
    warnings: tuple[Finding, ...] = ()


def resolve_definition(tree: SourceTree | PathArgs) -> ResolvedDefinition:
    """The tree's own ``CommonAttentionMetadata`` dataclass, else this suite's.

    With several in the tree, the first in walk order is used and each other one gets a
    CAM005 warning naming the one used.
    """
    tree = as_tree(tree)
    found: list[tuple[SourceFile, ast.ClassDef, CamDefinition]] = []
    for file in tree.files:
        if CAM_NAME not in file.text:
            continue
        for node in ast.walk(file.module):
            if isinstance(node, ast.ClassDef) and node.name == CAM_NAME:
                definition = definition_from_class(node, f"{file.display}:{node.lineno}")
                if definition is not None:
                    found.append((file, node, definition))
    if not found:
        return ResolvedDefinition(definition_from_conformance())
    chosen = found[0][2]
    warnings = tuple(
        Finding(
            path=file.display,
            line=node.lineno,
            col=node.col_offset,
            kind=WARNING,
            code="CAM005",
            message=(
                f"another {CAM_NAME} dataclass; construction sites are checked against "
                f"the one at {chosen.source}"
            ),
            names=(CAM_NAME,),
        )
        for file, node, _ in found[1:]
        if not file.suppressed("CAM005", node.lineno)
    )
    return ResolvedDefinition(chosen, warnings)


# ---------------------------------------------------------------------------- sites


def _cam_aliases(module: ast.Module) -> frozenset[str]:
    """Names that refer to ``CommonAttentionMetadata`` in `module`."""
    names = {CAM_NAME}
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom):
            names.update(a.asname for a in node.names if a.name == CAM_NAME and a.asname)
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, (ast.Name, ast.Attribute))
            and terminal_name(node.value) == CAM_NAME
        ):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(names)


def _is_cam_call(call: ast.Call, aliases: frozenset[str]) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in aliases
    return isinstance(func, ast.Attribute) and func.attr == CAM_NAME


def _dict_literal_keys(node: ast.AST) -> list[str] | None:
    """Keys of a ``{"a": ..}`` or ``dict(a=..)`` literal, or None when not all are known."""
    if isinstance(node, ast.Dict):
        keys = [constant_str(k) for k in node.keys]
        return None if any(k is None for k in keys) else keys  # type: ignore[return-value]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and not node.args
        and all(k.arg for k in node.keywords)
    ):
        return [k.arg for k in node.keywords]  # type: ignore[misc]
    return None


def _bind(call: ast.Call, definition: CamDefinition) -> dict[str, object]:
    passed: list[str] = []
    passed_none: list[str] = []
    unknown: list[str] = []
    unpacked = False
    extra_positional = 0
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            unpacked = True
            break
        if index < len(definition.positional):
            name = definition.positional[index]
            passed.append(name)
            if isinstance(arg, ast.Constant) and arg.value is None:
                passed_none.append(name)
        else:
            extra_positional += 1
    for keyword in call.keywords:
        if keyword.arg is None:
            keys = _dict_literal_keys(keyword.value)
            if keys is None:
                unpacked = True
                continue
            given = [(k, None) for k in keys]
        else:
            given = [(keyword.arg, keyword.value)]
        for name, value in given:
            passed.append(name)
            if isinstance(value, ast.Constant) and value.value is None:
                passed_none.append(name)
            if name not in definition.fields and name not in definition.deprecated:
                unknown.append(name)
    return {
        "passed": tuple(passed),
        "passed_none": tuple(passed_none),
        "unpacked": unpacked,
        "unknown": tuple(unknown),
        "extra_positional": extra_positional,
    }


def sites_in_file(file: SourceFile, definition: CamDefinition) -> list[ConstructionSite]:
    """Every construction site in one parsed file, in source order."""
    if CAM_NAME not in file.text:
        return []
    aliases = _cam_aliases(file.module)
    sites: list[ConstructionSite] = []
    for scope in iter_scopes(file.module):
        for node in scope.nodes:
            if isinstance(node, ast.Call) and _is_cam_call(node, aliases):
                sites.append(
                    ConstructionSite(
                        path=file.display,
                        relpath=file.relpath,
                        line=node.lineno,
                        col=node.col_offset,
                        end_line=node.end_lineno or node.lineno,
                        qualname=scope.qualname,
                        ignored=file.suppressions(node.lineno, node.end_lineno),
                        **_bind(node, definition),  # type: ignore[arg-type]
                    )
                )
    sites.sort(key=lambda s: (s.line, s.col))
    return sites


def find_construction_sites(
    root: PathArgs,
    *,
    exclude: Sequence[str] = (),
    strict: bool = True,
) -> list[ConstructionSite]:
    """Every `CommonAttentionMetadata(...)` call under `root` (a path or several).

    Positional arguments are mapped to field names with the tree's own definition (or this
    suite's). With `strict`, a file that does not parse raises `TreeParseError`; otherwise
    it is skipped.
    """
    tree = as_tree(root, exclude)
    if strict and tree.failures:
        raise TreeParseError(tree.failures)
    definition = resolve_definition(tree).definition
    return [site for file in tree.files for site in sites_in_file(file, definition)]


# ---------------------------------------------------------------------------- findings


def _describe_missing(absent: Sequence[str], none: Sequence[str], definition: CamDefinition) -> str:
    def reason(name: str) -> str:
        if name in definition.required:
            return "required"
        return BUILDER_NEEDED_REASONS.get(name, "needed")

    parts = []
    if absent:
        parts.append("leaves out " + join_names(f"{n} ({reason(n)})" for n in absent))
    if none:
        parts.append("passes None for " + join_names(f"{n} ({reason(n)})" for n in none))
    return " and ".join(parts)


def check_site(site: ConstructionSite, definition: CamDefinition) -> list[Finding]:
    """The findings for one construction site."""
    where = f"{CAM_NAME}(...) in {site.qualname}"

    def finding(kind: str, code: str, message: str, names: Sequence[str]) -> Finding:
        return Finding(
            path=site.path,
            line=site.line,
            col=site.col,
            kind=kind,
            code=code,
            message=f"{where} {message}",
            names=tuple(names),
            qualname=site.qualname,
        )

    findings: list[Finding] = []
    given = set(site.passed)
    absent = [n for n in definition.needed if n not in given]
    none = [n for n in definition.needed if n in site.passed_none]
    if site.unpacked and absent:
        findings.append(
            finding(
                UNVERIFIABLE,
                "CAM003",
                "unpacks *args/**kwargs, so the audit cannot verify that it passes "
                + join_names(absent)
                + f" (needed; definition at {definition.source})",
                absent,
            )
        )
        absent = []
    if absent or none:
        findings.append(
            finding(
                MISSING,
                "CAM001",
                _describe_missing(absent, none, definition)
                + f" (definition at {definition.source})",
                [*absent, *none],
            )
        )
    deprecated = [n for n in dict.fromkeys(site.passed) if n in definition.deprecated]
    if deprecated:
        hints = "; ".join(f"{n}: {definition.deprecated[n]}" for n in deprecated)
        findings.append(
            finding(
                DEPRECATED,
                "CAM002",
                f"passes deprecated {join_names(deprecated)} ({hints})",
                deprecated,
            )
        )
    if site.unknown:
        findings.append(
            finding(
                INVALID,
                "CAM004",
                f"passes {join_names(site.unknown)}, not a field of the definition at "
                f"{definition.source}",
                site.unknown,
            )
        )
    if site.extra_positional:
        findings.append(
            finding(
                INVALID,
                "CAM004",
                f"passes {site.extra_positional} positional argument(s) beyond the "
                f"{len(definition.positional)} positional fields of the definition at "
                f"{definition.source}",
                (),
            )
        )
    return findings


def audit_construction(
    tree: SourceTree | PathArgs,
    definition: CamDefinition | None = None,
    *,
    exclude: Sequence[str] = (),
) -> list[Finding]:
    """Findings for every construction site of `tree` (a parsed tree, or path(s) to load).

    Without `definition`, the tree's own is resolved (`resolve_definition`; its CAM005
    warnings are included). Files that do not parse are skipped here; `run_audit` reports
    them. Sites whose lines carry ``# conformance-audit: ignore[CODE]`` drop that code.
    """
    tree = as_tree(tree, exclude)
    findings: list[Finding] = []
    if definition is None:
        resolved = resolve_definition(tree)
        definition = resolved.definition
        findings += resolved.warnings
    for file in tree.files:
        for site in sites_in_file(file, definition):
            findings.extend(
                f
                for f in check_site(site, definition)
                if "*" not in site.ignored and f.code not in site.ignored
            )
    return findings
