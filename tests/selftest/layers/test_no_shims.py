"""No shims: every module of the suite defines something of its own; none only re-exports
names that live elsewhere (a moved module is moved, its importers follow it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("conformance", "backends", "kernels")
ENTRY_FILES = frozenset({"__init__.py", "__main__.py"})
"""A package's face and its ``python -m`` entry may consist of imports alone."""
FACES = frozenset({"backends/api.py"})
"""Modules whose purpose is to gather names: the one module a plug-in imports from."""


def _borrowed(statement: ast.stmt) -> bool:
    """Whether a top-level statement only brings in or passes on names defined elsewhere."""
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return True
    if isinstance(statement, ast.Expr):  # the docstring, or warnings.warn("moved ...")
        return isinstance(statement.value, ast.Constant | ast.Call)
    if isinstance(statement, ast.Assign | ast.AnnAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        names = [target.id for target in targets if isinstance(target, ast.Name)]
        alias = isinstance(statement.value, ast.Name | ast.Attribute)
        return names == ["__all__"] or alias
    return False


def is_shim(source: str) -> bool:
    """A module that defines nothing: imports, ``__all__``, aliases and warnings only."""
    body = ast.parse(source).body
    return bool(body) and all(_borrowed(statement) for statement in body)


def shims(root: Path) -> list[str]:
    """Repository-relative paths of the shim modules under ``root``'s packages."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if path.name in ENTRY_FILES or name in FACES:
                continue
            if is_shim(path.read_text(encoding="utf-8")):
                found.append(name)
    return found


def test_the_suite_has_no_shim() -> None:
    assert shims(REPO_ROOT) == []


def test_the_plug_in_face_is_the_one_module_of_names_alone() -> None:
    assert is_shim((REPO_ROOT / "backends" / "api.py").read_text(encoding="utf-8"))


SHIM = '''"""Moved to `pkg.new`; these names stay here for one release."""

from __future__ import annotations

import warnings

from pkg.new import moved, other

OLD_NAME = moved
warnings.warn("pkg.old moved to pkg.new", DeprecationWarning, stacklevel=2)

__all__ = ["moved", "other", "OLD_NAME"]
'''


def test_a_module_that_only_re_exports_is_a_shim(tmp_path: Path) -> None:
    (tmp_path / "conformance").mkdir()
    (tmp_path / "conformance" / "old.py").write_text(SHIM, encoding="utf-8")
    (tmp_path / "conformance" / "__init__.py").write_text("from pkg import x\n")
    assert shims(tmp_path) == ["conformance/old.py"]


@pytest.mark.parametrize(
    "source",
    [
        "from pkg.new import moved\n\n\ndef helper() -> int:\n    return moved()\n",
        "from pkg.new import moved\n\nLIMIT = 3\n",
        "from pkg.new import Base\n\n\nclass Own(Base):\n    pass\n",
    ],
)
def test_a_module_with_anything_of_its_own_is_not(source: str) -> None:
    assert not is_shim(source)
