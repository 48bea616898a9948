"""Walking a source tree safely: which files to audit, and the named problems of the rest.

`walk` lists every ``.py`` file below the given PATHs without ever opening anything that is
not a regular file (each entry is ``stat``-ed first: FIFOs, devices and sockets are named
problems, never read), following links only where they stay inside the audited PATHs,
naming a link loop instead of looping, never entering a special filesystem (``/proc``,
``/sys``), and naming unreadable or unlistable directories instead of skipping them. Paths are
displayed *as given*: the PATH joined with the file's path below it, so every printed path
opens from the directory the audit was started in.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from conformance.audit.findings import Problem
from conformance.audit.mounts import Mounts
from conformance.errors import ConformanceError

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
"""Folder names never descended into (also ``*.egg-info`` and virtual environments)."""

_SUPPORT_FOLDERS = frozenset({"tests", "test", "benchmarks"})


class AuditPathError(ConformanceError, FileNotFoundError):
    """A PATH given to the audit cannot be audited (missing, a FIFO, a link loop, ...)."""


@dataclass(frozen=True)
class FileEntry:
    """One ``.py`` file to audit."""

    path: str
    """Where it is on disk (as reached, links not resolved)."""
    display: str
    """How findings name it: the PATH as given joined with `relpath`."""
    relpath: str
    """Below its PATH, ``/``-separated (the file name for a file PATH)."""
    root: str
    """The PATH it was found under, as given."""
    size: int

    @property
    def is_support(self) -> bool:
        """Test or benchmark code: under ``tests``/``test``/``benchmarks``, or named
        ``test_*.py``, ``*_test.py`` or ``conftest.py``."""
        return is_support_path(self.relpath)


def is_support_path(relpath: str) -> bool:
    """Whether `relpath` is test or benchmark code (see `FileEntry.is_support`)."""
    *folders, name = relpath.split("/")
    return (
        any(f in _SUPPORT_FOLDERS for f in folders)
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


@dataclass
class Walk:
    """The files found and the problems met on the way."""

    files: list[FileEntry] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _excluded(relpath: str, exclude: Sequence[str]) -> bool:
    name = relpath.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(relpath, p) or fnmatch.fnmatch(name, p) for p in exclude)


def _display(given: str, relpath: str) -> str:
    return os.path.normpath(os.path.join(given, relpath))


def _stat_problem(display: str, exc: OSError) -> Problem:
    if exc.errno == errno.ELOOP:
        return Problem(display, 0, "symlink-loop", "a symbolic link loop; not followed")
    if exc.errno == errno.ENOENT:
        return Problem(display, 0, "dangling-link", "a symbolic link to nothing")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Problem(display, 0, "unreadable", f"cannot stat: {exc.strerror}")
    return Problem(display, 0, "unreadable", f"cannot stat: {exc.strerror or exc}")


WALK_LIMITS = {"entries": 2_000_000, "files": 200_000, "depth": 200}
"""Bounds on any input: directory entries looked at, ``.py`` files listed, folder depth."""


def _inside(real: str, roots: Sequence[str]) -> bool:
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def check_path(given: str, mounts: Mounts | None = None) -> os.stat_result:
    """``stat`` a PATH argument; `AuditPathError` with a proper message when it cannot be
    audited (missing, a link loop, a FIFO or device, unreadable, on a special filesystem)."""
    try:
        info = os.stat(given)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise AuditPathError(f"audit PATH {given!r}: a symbolic link loop") from None
        if exc.errno == errno.ENOENT:
            raise AuditPathError(f"audit PATH {given!r}: no such file or directory") from None
        raise AuditPathError(f"audit PATH {given!r}: cannot stat: {exc.strerror}") from None
    special = (mounts or Mounts()).special(os.path.realpath(given))
    if special is not None:
        raise AuditPathError(
            f"audit PATH {given!r}: on a {special} filesystem (generated, not source); not audited"
        )
    if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
        return info
    raise AuditPathError(
        f"audit PATH {given!r}: {_kind(info.st_mode)}, not a directory or .py file (never opened)"
    )


def walk(paths: Iterable[str | os.PathLike[str]], exclude: Sequence[str] = ()) -> Walk:
    """Every ``.py`` file below `paths`, and the named problems met.

    Raises `AuditPathError` for a PATH that cannot be audited at all. A file reached twice
    (two PATHs, or a link) is listed once. The walk never leaves the PATHs: a link is
    followed only when it resolves inside one of them, a special filesystem mounted below
    one is not entered, and `WALK_LIMITS` bound it on any input (each a named problem).
    """
    given_paths = [os.fspath(p) for p in paths]
    mounts = Mounts()
    infos = [check_path(g, mounts) for g in given_paths]
    walker = _Walker([os.path.realpath(g) for g in given_paths], exclude, mounts, dict(WALK_LIMITS))
    for given, info in zip(given_paths, infos, strict=True):
        if stat.S_ISREG(info.st_mode):
            if (info.st_dev, info.st_ino) not in walker.seen:
                walker.seen.add((info.st_dev, info.st_ino))
                name = os.path.basename(given)
                walker.result.files.append(FileEntry(given, given, name, given, info.st_size))
            continue
        walker.walk_dir(given, given, "", info, ())
    return walker.result


class _Walker:
    """One walk's state: the roots it stays in, what it has seen, its remaining budget."""

    def __init__(
        self, roots: list[str], exclude: Sequence[str], mounts: Mounts, limits: dict[str, int]
    ) -> None:
        self.roots = roots
        self.exclude = exclude
        self.mounts = mounts
        self.limits = limits
        self.seen: set[tuple[int, int]] = set()
        self.result = Walk()
        self.stopped = False

    def _stop(self, display: str, what: str) -> None:
        if not self.stopped:
            self.stopped = True
            self.result.problems.append(
                Problem(display, 0, "walk-limit", f"{what}; the rest of the tree is not audited")
            )

    def walk_dir(
        self,
        given: str,
        folder: str,
        rel: str,
        info: os.stat_result,
        ancestors: tuple[tuple[int, int], ...],
    ) -> None:
        display = _display(given, rel or ".")
        ident = (info.st_dev, info.st_ino)
        if ident in ancestors:
            self.result.problems.append(
                Problem(display, 0, "symlink-loop", "a directory link back to its own ancestor")
            )
            return
        if ident in self.seen or self.stopped:
            return
        if len(ancestors) >= self.limits["depth"]:
            self._stop(display, f"folders nested over {self.limits['depth']} deep")
            return
        self.seen.add(ident)
        try:
            with os.scandir(folder) as iterator:
                entries = []
                for entry in iterator:
                    self.limits["entries"] -= 1
                    if self.limits["entries"] < 0:
                        self._stop(display, f"over {WALK_LIMITS['entries']:,} directory entries")
                        return
                    entries.append(entry)
        except OSError as exc:
            enterable = os.access(folder, os.X_OK)
            name = "unlistable-dir" if enterable else "unreadable-dir"
            why = "can be entered but not listed" if enterable else "cannot be read"
            self.result.problems.append(Problem(display, 0, name, f"{why}: {exc.strerror or exc}"))
            return
        chain = (*ancestors, ident)
        for entry in sorted(entries, key=lambda e: e.name):
            if self.stopped:
                return
            self._entry(given, entry, f"{rel}/{entry.name}" if rel else entry.name, info, chain)

    def _entry(
        self,
        given: str,
        entry: os.DirEntry[str],
        child_rel: str,
        parent: os.stat_result,
        chain: tuple[tuple[int, int], ...],
    ) -> None:
        if _excluded(child_rel, self.exclude):
            return
        child_display = _display(given, child_rel)
        is_py = entry.name.endswith(".py")
        try:
            info = os.stat(entry.path)  # follows links; never opens
        except OSError as exc:
            if is_py or entry.is_symlink():
                self.result.problems.append(_stat_problem(child_display, exc))
            return
        is_dir = stat.S_ISDIR(info.st_mode)
        if entry.is_symlink() and (is_dir or is_py):
            real = os.path.realpath(entry.path)
            if not _inside(real, self.roots):
                self.result.problems.append(
                    Problem(
                        child_display,
                        0,
                        "link-outside-root",
                        f"a link to {real}, outside the audited tree; not followed",
                    )
                )
                return
        if is_dir:
            if (
                entry.name in SKIP_DIR_NAMES
                or entry.name.endswith(".egg-info")
                or os.path.lexists(os.path.join(entry.path, "pyvenv.cfg"))
            ):
                return
            if info.st_dev != parent.st_dev:
                special = self.mounts.special(os.path.realpath(entry.path))
                if special is not None:
                    self.result.problems.append(
                        Problem(
                            child_display,
                            0,
                            "special-filesystem",
                            f"a {special} filesystem (generated, not source); not entered",
                        )
                    )
                    return
            self.walk_dir(given, entry.path, child_rel, info, chain)
        elif is_py:
            key = (info.st_dev, info.st_ino)
            if not stat.S_ISREG(info.st_mode):
                self.result.problems.append(
                    Problem(
                        child_display, 0, "not-a-regular-file", f"{_kind(info.st_mode)}; not opened"
                    )
                )
            elif key not in self.seen:
                self.seen.add(key)
                if len(self.result.files) >= self.limits["files"]:
                    self._stop(child_display, f"over {WALK_LIMITS['files']:,} .py files")
                    return
                self.result.files.append(
                    FileEntry(entry.path, child_display, child_rel, given, info.st_size)
                )


def _package_chain(folder: str) -> list[str]:
    """The package names of `folder` and of the packages above it (folders holding
    ``__init__.py``), outermost first; empty for a folder that is no package."""
    chain: list[str] = []
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        chain.insert(0, os.path.basename(folder))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return chain


def module_names(entry: FileEntry, package_dirs: set[str]) -> list[str]:
    """Dotted module names `entry` is importable as: by its package chain (folders holding
    ``__init__.py``), and by its path below its PATH (namespace-package style), prefixed by
    the PATH's own package chain where the PATH is a package (``audit .../sglang`` names
    ``sglang/srt/x.py`` ``sglang.srt.x`` though ``srt`` has no ``__init__.py``)."""
    parts = entry.relpath[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    names = []
    if all(p.isidentifier() for p in parts) and parts:
        names.append(".".join(parts))
        root = os.path.abspath(entry.root)
        outer = _package_chain(root) if os.path.isdir(root) else []
        if outer and all(p.isidentifier() for p in outer):
            names.append(".".join([*outer, *parts]))
    folder = os.path.dirname(os.path.abspath(entry.path))
    chain = [] if os.path.basename(entry.path) == "__init__.py" else [parts[-1] if parts else ""]
    while folder in package_dirs or os.path.isfile(os.path.join(folder, "__init__.py")):
        package_dirs.add(folder)
        chain.insert(0, os.path.basename(folder))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    chain = [c for c in chain if c]
    if chain and all(c.isidentifier() for c in chain):
        dotted = ".".join(chain)
        if dotted not in names:
            names.insert(0, dotted)
    return names
