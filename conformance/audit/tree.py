"""Reading a source tree for the static audits: files, parse trees, scopes, suppressions.

`load_tree` walks every ``.py`` file under the given paths (skipping VCS folders, nox/tox
and virtual environments, caches), parses each one and collects the files that do not
parse as `ParseFailure`s instead of stopping. Paths are displayed *as given*: the PATH
argument joined with the file's path below it (``audit .`` shows ``benchmarks/x.py``,
``audit ../vllm`` shows ``../vllm/benchmarks/x.py``), so every printed path opens from the
directory the audit was started in.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.audit.findings import ParseFailure
from conformance.errors import ConformanceError

# Folder names never descended into.
SKIP_DIR_NAMES: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".nox",
        ".tox",
        ".venv",
        "venv",
        ".eggs",
        "__pycache__",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "site-packages",
    }
)

_SUPPRESSION = re.compile(r"#\s*conformance-audit:\s*ignore(?:\[(?P<codes>[A-Za-z0-9_,\s]+)\])?")


class TreeParseError(ConformanceError):
    """A library caller asked for a strict audit and some files do not parse."""

    def __init__(self, failures: Sequence[ParseFailure]) -> None:
        self.failures = tuple(failures)
        listed = "; ".join(f"{f.path}:{f.line}: {f.message}" for f in self.failures)
        super().__init__(f"{len(self.failures)} file(s) do not parse: {listed}")


class AuditPathError(ConformanceError, FileNotFoundError):
    """A PATH given to the audit does not exist or is not a directory or ``.py`` file."""


@dataclass
class SourceFile:
    """One parsed Python file."""

    path: Path
    """Where the file is on disk."""
    display: str
    """How findings name it: the PATH as given joined with `relpath`."""
    relpath: str
    """Path below the audited PATH, ``/``-separated (the file name for a file PATH)."""
    module: ast.Module
    text: str
    """The source, decoded (undecodable bytes replaced): a cheap pre-filter for audits."""
    _suppressions: dict[int, frozenset[str] | None] | None = field(default=None, repr=False)

    @property
    def lines(self) -> list[str]:
        """The source lines."""
        return self.text.splitlines()

    def suppressed(self, code: str, first_line: int, last_line: int | None = None) -> bool:
        """Whether a ``# conformance-audit: ignore[...]`` comment on lines
        `first_line`..`last_line` silences `code` (a bare ``ignore`` silences every code)."""
        codes = self.suppressions(first_line, last_line)
        return "*" in codes or code in codes

    def suppressions(self, first_line: int, last_line: int | None = None) -> frozenset[str]:
        """The codes ``# conformance-audit: ignore[...]`` comments silence on lines
        `first_line`..`last_line`; ``"*"`` stands for a bare ``ignore`` (every code)."""
        if self._suppressions is None:
            self._suppressions = {}
            for number, line in enumerate(self.lines, start=1):
                if "conformance-audit" not in line:
                    continue
                match = _SUPPRESSION.search(line)
                if match is None:
                    continue
                codes = match.group("codes")
                self._suppressions[number] = (
                    None
                    if codes is None
                    else frozenset(c.strip().upper() for c in codes.split(",") if c.strip())
                )
        found: set[str] = set()
        for number in range(first_line, (last_line or first_line) + 1):
            if number in self._suppressions:
                codes = self._suppressions[number]
                found |= {"*"} if codes is None else codes
        return frozenset(found)


@dataclass
class SourceTree:
    """The parsed files of one audit, and the files that did not parse."""

    files: list[SourceFile]
    failures: list[ParseFailure]


def load_tree(paths: Iterable[str | os.PathLike[str]], exclude: Sequence[str] = ()) -> SourceTree:
    """Parse every ``.py`` file under `paths` (directories or files).

    `exclude` holds glob patterns matched against each file's or folder's path below its
    PATH and against its bare name. Raises `AuditPathError` for a PATH that does not exist.
    A file seen through two PATHs is read once.
    """
    files: list[SourceFile] = []
    failures: list[ParseFailure] = []
    seen: set[Path] = set()
    for given in paths:
        given_text = os.fspath(given)
        for path, relpath in _iter_python_files(given_text, exclude):
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            display = _display_path(given_text, relpath, is_dir=Path(given_text).is_dir())
            parsed = _parse(path, display, relpath)
            if isinstance(parsed, ParseFailure):
                failures.append(parsed)
            else:
                files.append(parsed)
    return SourceTree(files=files, failures=failures)


PathArgs = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
"""One path or several, as the audit functions accept them."""


def as_tree(source: SourceTree | PathArgs, exclude: Sequence[str] = ()) -> SourceTree:
    """`source` itself if it is a `SourceTree`, else `load_tree` of the path(s) it names."""
    if isinstance(source, SourceTree):
        return source
    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    return load_tree(paths, exclude)


def _display_path(given: str, relpath: str, *, is_dir: bool) -> str:
    if not is_dir:
        return given
    return os.path.normpath(os.path.join(given, relpath))


def _excluded(relpath: str, exclude: Sequence[str]) -> bool:
    name = relpath.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(relpath, p) or fnmatch.fnmatch(name, p) for p in exclude)


def _iter_python_files(given: str, exclude: Sequence[str]) -> Iterator[tuple[Path, str]]:
    root = Path(given)
    if root.is_file():
        yield root, root.name
        return
    if not root.is_dir():
        raise AuditPathError(f"audit PATH {given!r}: no such file or directory")
    for folder, dirnames, filenames in os.walk(root):
        folder_path = Path(folder)
        rel_folder = folder_path.relative_to(root).as_posix()
        kept = []
        for name in sorted(dirnames):
            rel = name if rel_folder == "." else f"{rel_folder}/{name}"
            if (
                name in SKIP_DIR_NAMES
                or name.endswith(".egg-info")
                or (folder_path / name / "pyvenv.cfg").exists()
                or _excluded(rel, exclude)
            ):
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            rel = name if rel_folder == "." else f"{rel_folder}/{name}"
            if not _excluded(rel, exclude):
                yield folder_path / name, rel


def _parse(path: Path, display: str, relpath: str) -> SourceFile | ParseFailure:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return ParseFailure(display, 0, 0, f"cannot read: {exc.strerror or exc}")
    try:
        module = ast.parse(data, filename=display)
    except SyntaxError as exc:
        return ParseFailure(display, exc.lineno or 0, exc.offset or 0, exc.msg)
    except ValueError as exc:  # null bytes, on older Pythons
        return ParseFailure(display, 0, 0, str(exc))
    text = data.decode("utf-8", errors="replace")
    return SourceFile(path, display, relpath, module, text)


# ---------------------------------------------------------------------------- scopes


@dataclass
class Scope:
    """The nodes that run in one module, class body or function body."""

    node: ast.AST
    kind: str
    """``module``, ``class`` or ``function`` (lambdas included)."""
    qualname: str
    """``<module>``, or the function's / class's `__qualname__`."""
    nodes: list[ast.AST]
    """Every node of this scope in source order, nested def and class bodies left out."""


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def iter_scopes(module: ast.Module) -> list[Scope]:
    """Every scope of `module`, outermost first."""
    scopes: list[Scope] = []
    pending: list[tuple[ast.AST, str, str]] = [(module, "module", "<module>")]
    while pending:
        node, kind, qualname = pending.pop(0)
        own, nested = _scope_members(node)
        scopes.append(Scope(node, kind, qualname, own))
        for child in nested:
            pending.append((child, *_child_scope(child, kind, qualname)))
    return scopes


def _child_scope(child: ast.AST, parent_kind: str, parent_qualname: str) -> tuple[str, str]:
    name = "<lambda>" if isinstance(child, ast.Lambda) else child.name  # type: ignore[attr-defined]
    kind = "class" if isinstance(child, ast.ClassDef) else "function"
    if parent_kind == "module":
        return kind, name
    if parent_kind == "function":
        return kind, f"{parent_qualname}.<locals>.{name}"
    return kind, f"{parent_qualname}.{name}"


def _scope_members(node: ast.AST) -> tuple[list[ast.AST], list[ast.AST]]:
    if isinstance(node, ast.Lambda):
        stack: list[ast.AST] = [node.body]
    else:
        stack = list(node.body)  # type: ignore[attr-defined]
    own: list[ast.AST] = []
    nested: list[ast.AST] = []
    while stack:
        current = stack.pop()
        own.append(current)
        if isinstance(current, _FUNCTIONS):
            nested.append(current)
            args = current.args
            stack.extend(args.defaults)
            stack.extend(d for d in args.kw_defaults if d is not None)
            if not isinstance(current, ast.Lambda):
                stack.extend(current.decorator_list)
        elif isinstance(current, ast.ClassDef):
            nested.append(current)
            stack.extend(current.decorator_list)
            stack.extend(current.bases)
            stack.extend(k.value for k in current.keywords)
        else:
            stack.extend(ast.iter_child_nodes(current))
    own.sort(key=_position)
    nested.sort(key=_position)
    return own, nested


def _position(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


# ---------------------------------------------------------------------------- helpers


def terminal_name(node: ast.AST) -> str | None:
    """The last name of a dotted expression: ``a.b.c`` → ``c``, ``X[int]`` → ``X``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def constant_str(node: ast.AST | None) -> str | None:
    """The value of a string literal, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None
