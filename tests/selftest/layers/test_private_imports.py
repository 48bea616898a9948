"""No private name crosses a module boundary: no module of the project does
``from X import _name`` where X is another of its modules (a package's ``__init__``
included). A name another module needs is public, under a name that says what it is."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
SOURCE_DIRS = ("conformance", "backends", "kernels", "benchmarks", "scripts", "examples", "tests")
EXTRA_IMPORT_ROOTS = ("tests/selftest/support", "scripts", "examples/*/src")
"""Folders put on ``sys.path`` besides the root (pyproject's pythonpath, the scripts' own
folder, an example plug-in's source): their modules are the project's too."""


def _top_level_names(folder: Path) -> set[str]:
    """Names importable from `folder` on ``sys.path``: its modules and packages."""
    return {p.stem for p in folder.glob("*.py")} | {
        p.name for p in folder.iterdir() if p.is_dir() and any(p.rglob("*.py"))
    }


def project_names(root: Path) -> set[str]:
    """The first components of every dotted name that imports a module of the project."""
    names = {d for d in SOURCE_DIRS if (root / d).is_dir()} | {p.stem for p in root.glob("*.py")}
    for pattern in EXTRA_IMPORT_ROOTS:
        for folder in root.glob(pattern):
            names |= _top_level_names(folder)
    return names


def _source(node: ast.ImportFrom, path: Path, root: Path) -> str:
    """The dotted module a ``from ... import`` reads, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = list(path.relative_to(root).parent.parts)
    package = package[: len(package) - node.level + 1]
    return ".".join([*package, *([node.module] if node.module else [])])


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(root: Path) -> Iterator[str]:
    """``path:line: from X import _name`` for each private name a module of the project
    imports from another of its modules, function-level and multi-line imports included."""
    ours = project_names(root)
    for folder in SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            except SyntaxError:  # a deliberately broken fixture is no module
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom):
                    continue
                source = _source(node, path, root)
                if source.split(".")[0] not in ours:
                    continue
                for alias in node.names:
                    if _is_private(alias.name):
                        where = path.relative_to(root).as_posix()
                        yield f"{where}:{node.lineno}: from {source} import {alias.name}"


def test_no_module_imports_a_private_name_of_another() -> None:
    assert list(private_imports(REPO_ROOT)) == []


# Negative controls: small trees that break the rule, and imports it leaves alone.

PRIVATE = {
    "plain": ("conformance/a.py", "from conformance.b import _helper\n"),
    "multi-line": ("backends/a.py", "from backends.b import (\n    public,\n    _helper,\n)\n"),
    "in a function": ("kernels/a.py", "def f():\n    from kernels.b import _helper\n"),
    "relative": ("conformance/x/a.py", "from .b import _helper\n"),
    "own package": ("conformance/x/a.py", "from conformance.x import _helper\n"),
    "a test's import": ("tests/selftest/t.py", "from conformance.b import _helper\n"),
    "a support module": ("tests/t.py", "from fake_lib import _helper\n"),
    "a script's sibling": ("scripts/run.py", "from carry import _helper\n"),
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    base = {
        "conformance/__init__.py": "",
        "conformance/x/__init__.py": "",
        "tests/selftest/support/fake_lib.py": "",
        "scripts/carry.py": "",
    }
    for name, text in {**base, **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize("case", sorted(PRIVATE))
def test_a_private_import_is_named(tmp_path: Path, case: str) -> None:
    path, text = PRIVATE[case]
    found = list(private_imports(_tree(tmp_path, {path: text})))
    assert len(found) == 1 and found[0].startswith(f"{path}:") and found[0].endswith("_helper")


@pytest.mark.parametrize(
    "text",
    [
        "from os import _exit\n",  # another library's private name: not ours to rename
        "from torch._C import Generator\n",  # a public name of a private module
        "from conformance import __version__\n",  # a dunder is no private name
        "from __future__ import annotations\n",
        "import conformance.b\n\nconformance.b._helper()\n",  # attribute access: out of scope
    ],
)
def test_what_is_not_a_private_import_of_ours(tmp_path: Path, text: str) -> None:
    assert list(private_imports(_tree(tmp_path, {"conformance/a.py": text}))) == []
