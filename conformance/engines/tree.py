"""An engine's source tree: where its root is, and which release it is (standard library only).

A tree is an engine's (``vllm``) when it, or a folder above it, is one of the forms a real
tree takes: a checkout or an sdist (a ``vllm/`` package beside ``pyproject.toml``/``PKG-INFO``),
a site-packages folder (``vllm/`` beside ``vllm-X.dist-info``), or the ``vllm`` package
itself. Its version is read from every form a release carries, first found wins:

* ``vllm/_version.py`` as setuptools-scm / vcs-versioning write it
  (``__version__ = version = '0.33.0'``, ``version = '0.6.3'``, ``__version__: str = ...``,
  or only ``__version_tuple__ = version_tuple = (0, 33, 0)``);
* ``vllm/version.py`` or ``vllm/__init__.py`` with a module-level ``__version__ = "0.4.0"``
  (older releases; the indented ``"dev"`` fallback of newer ones is not a version);
* ``PKG-INFO`` of an sdist, ``vllm.egg-info/PKG-INFO``, ``vllm-X.dist-info/METADATA``
  (``Name: vllm`` and ``Version: X``);
* ``pyproject.toml`` whose ``[project]`` is named ``vllm`` with a static ``version``.

A git checkout carries none of these (``_version.py`` is written at build time): its
version is unknown, and said so.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_ASSIGNED = r"""['"]([0-9][^'"]*)['"]"""
_VERSION_ASSIGNMENTS = (
    # __version__ = version = '0.33.0' | __version__: str = '...' | version = '...'
    re.compile(
        r"^(?:__version__|version)\s*(?::\s*str\s*)?="
        r"(?:\s*(?:__version__|version)\s*=)?\s*" + _ASSIGNED,
        re.M,
    ),
)
_VERSION_TUPLE = re.compile(
    r"^(?:__version_tuple__|version_tuple)\s*(?::[^=\n]*)?="
    r"(?:\s*(?:__version_tuple__|version_tuple)\s*=)?\s*\(([^)]*)\)",
    re.M,
)
_METADATA_NAME = re.compile(r"^Name:\s*(\S+)", re.M)
_METADATA_VERSION = re.compile(r"^Version:\s*(\S+)", re.M)
_PROJECT_TABLE = re.compile(r"^\[project\]\s*$(?P<body>.*?)(?=^\[|\Z)", re.M | re.S)
_TOML_STRING = r"""\s*=\s*['"]([^'"]+)['"]"""
_LIMIT = 65536
_MAX_LEVELS = 64


@dataclass(frozen=True)
class TreeVersion:
    """An engine tree's root and version (None: unknown), and the file it was read from."""

    root: Path | None
    version: str | None
    source: str = ""


def _read(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(_LIMIT)
    except OSError:
        return ""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_version(text: str, package: str) -> str | None:
    """``Version:`` of a PKG-INFO / METADATA whose ``Name:`` is `package`."""
    name, version = _METADATA_NAME.search(text), _METADATA_VERSION.search(text)
    if name and version and _normal(name.group(1)) == _normal(package):
        return version.group(1)
    return None


def _pyproject_version(text: str, package: str) -> str | None:
    """The static ``[project] version`` of a pyproject named `package`."""
    table = _PROJECT_TABLE.search(text)
    if table is None:
        return None
    body = table.group("body")
    name = re.search(r"^name" + _TOML_STRING, body, re.M)
    version = re.search(r"^version" + _TOML_STRING, body, re.M)
    if name and version and _normal(name.group(1)) == _normal(package):
        return version.group(1)
    return None


def _python_version(text: str) -> str | None:
    """A module-level version assignment of a ``_version.py``-like file."""
    for pattern in _VERSION_ASSIGNMENTS:
        match = pattern.search(text)
        if match:
            return match.group(1)
    match = _VERSION_TUPLE.search(text)
    if match:
        parts = [p.strip().strip("'\"") for p in match.group(1).split(",") if p.strip()]
        numbers = [p for p in parts if p.isdigit()]
        if len(numbers) >= 2 and parts[: len(numbers)] == numbers:
            return ".".join(numbers)
    return None


def _own_package(folder: Path, package: str) -> bool:
    """Whether `folder` is the engine's package itself (``.../vllm`` with its own files)."""
    return (
        folder.name == package
        and (folder / "__init__.py").is_file()
        and any((folder / name).exists() for name in ("_version.py", "version.py", "v1"))
    )


def is_root(folder: Path, package: str) -> bool:
    """Whether `folder` is the top of an engine tree (checkout, sdist, site-packages)."""
    if (folder / package / "__init__.py").is_file():
        return True
    if _metadata_version(_read(folder / "PKG-INFO"), package):
        return True
    return _pyproject_version(_read(folder / "pyproject.toml"), package) is not None


def find_root(path: str | os.PathLike[str], package: str = "vllm") -> Path | None:
    """The engine tree holding `path` (it, or the nearest folder above), or None."""
    folder = Path(os.path.abspath(path))
    folder = folder if folder.is_dir() else folder.parent
    for _ in range(_MAX_LEVELS):
        if _own_package(folder, package):
            return folder.parent
        if is_root(folder, package):
            return folder
        if folder.parent == folder:
            return None
        folder = folder.parent
    return None


def read_version(root: Path, package: str = "vllm") -> tuple[str | None, str]:
    """(the version of the engine tree at `root`, the file it was read from)."""
    for name in ("_version.py", "version.py", "__init__.py"):
        found = _python_version(_read(root / package / name))
        if found:
            return found, f"{package}/{name}"
    for name in ("PKG-INFO", f"{package}.egg-info/PKG-INFO"):
        found = _metadata_version(_read(root / name), package)
        if found:
            return found, name
    for info in sorted(root.glob(f"{package}-*.dist-info")):
        found = _metadata_version(_read(info / "METADATA"), package)
        if found:
            return found, f"{info.name}/METADATA"
    found = _pyproject_version(_read(root / "pyproject.toml"), package)
    return (found, "pyproject.toml") if found else (None, "")


def tree_version(path: str | os.PathLike[str], package: str = "vllm") -> TreeVersion:
    """The engine tree holding `path`, and its version where the tree carries one."""
    root = find_root(path, package)
    if root is None:
        return TreeVersion(None, None)
    version, source = read_version(root, package)
    return TreeVersion(root, version, source)
