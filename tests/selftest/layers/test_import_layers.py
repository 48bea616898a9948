"""Imports run one way: no circle between modules or packages (nor between the packages inside
one), no arrow running back up the floors of docs/layout.md (`import_graph.LAYERS`), every
module on a floor. Each rule is shown to reject a small tree that breaks it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
_SPEC = importlib.util.spec_from_file_location(
    "import_graph", Path(__file__).with_name("import_graph.py")
)
assert _SPEC is not None and _SPEC.loader is not None
graph_module = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("import_graph", graph_module)
_SPEC.loader.exec_module(graph_module)
Layer = graph_module.Layer


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return graph_module.import_graph(REPO_ROOT)


def test_no_module_imports_itself_in_a_circle(graph: dict[str, set[str]]) -> None:
    assert graph_module.cycles(graph) == []


def test_no_package_imports_itself_in_a_circle(graph: dict[str, set[str]]) -> None:
    assert graph_module.cycles(graph_module.package_graph(graph)) == []


def test_no_package_inside_a_package_imports_itself_in_a_circle(
    graph: dict[str, set[str]],
) -> None:
    assert graph_module.cycles(graph_module.inner_package_graph(graph)) == []


def test_no_arrow_runs_back_up_the_layers(graph: dict[str, set[str]]) -> None:
    assert graph_module.upward_arrows(graph) == []


def test_every_module_has_a_floor(graph: dict[str, set[str]]) -> None:
    assert graph_module.unplaced(graph) == []


def test_the_graph_sees_the_suite(graph: dict[str, set[str]]) -> None:
    """The reader finds real arrows, function-level ones included."""
    assert "conformance.targets" in graph["backends.registry"]
    assert "backends.registry" in graph["conformance.harness.plugin"]  # in a function
    assert "conformance.runs.names" in graph["conformance.signoff.discovery"]


# Negative controls: small trees that break each rule.

LAYERS = (Layer(("low",)), Layer(("mid_a", "mid_b")), Layer(("top",)))


def _tree(root: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    packages = sorted({name.split("/")[0] for name in files})
    return graph_module.import_graph(root, packages)


@pytest.mark.parametrize(
    "back",
    [
        "def f():\n    from low import a\n    return a\n",  # a function-level import
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from low.a import X\n"
        "def f(): ...\n",  # a type-checking import
    ],
)
def test_a_module_circle_is_rejected_however_it_imports(tmp_path: Path, back: str) -> None:
    files = {"low/__init__.py": "", "low/a.py": "from low.b import f\n", "low/b.py": back}
    assert graph_module.cycles(_tree(tmp_path, files)) == [["low.a", "low.b"]]


# mid_a.one -> mid_b.two -> mid_a.three: no module circle, but a package circle
PACKAGE_CIRCLE = {"mid_a/__init__.py": "", "mid_a/one.py": "from mid_b.two import g\n",
                  "mid_b/__init__.py": "", "mid_b/two.py": "def g():\n    import mid_a.three\n",
                  "mid_a/three.py": ""}  # fmt: skip
# low.a.x -> low.b.y -> low.a.z: one floor's member, but a circle of the packages inside it
INNER_CIRCLE = {"low/__init__.py": "", "low/a/__init__.py": "", "low/b/__init__.py": "",
                "low/a/x.py": "from low.b.y import f\n", "low/a/z.py": "",
                "low/b/y.py": "def f():\n    from low.a import z\n"}  # fmt: skip
# low -> top (up), mid_a -> mid_b (peers that may not), mid_a -> low and top -> mid_a (down)
WRONG_WAY = {"low/__init__.py": "from top import tool\n", "mid_b/__init__.py": "import low\n",
             "mid_a/__init__.py": "from .. import low\nfrom mid_b import x\n",
             "top/__init__.py": "", "top/tool.py": "import mid_a\n"}  # fmt: skip


def test_a_package_circle_is_rejected(tmp_path: Path) -> None:
    graph = _tree(tmp_path, PACKAGE_CIRCLE)
    assert graph_module.cycles(graph) == []
    assert graph_module.cycles(graph_module.package_graph(graph, LAYERS)) == [["mid_a", "mid_b"]]


def test_a_circle_of_the_packages_inside_a_package_is_rejected(tmp_path: Path) -> None:
    graph = _tree(tmp_path, INNER_CIRCLE)
    assert graph_module.cycles(graph_module.package_graph(graph, LAYERS)) == []
    assert graph_module.cycles(graph_module.inner_package_graph(graph)) == [["low.a", "low.b"]]


def test_an_arrow_back_up_and_one_between_peers_are_rejected(tmp_path: Path) -> None:
    assert graph_module.upward_arrows(_tree(tmp_path, WRONG_WAY), LAYERS) == [
        "low -> top (low imports top.tool)",
        "mid_a -> mid_b (mid_a imports mid_b)",
    ]


def test_a_package_on_no_floor_is_named(tmp_path: Path) -> None:
    graph = _tree(tmp_path, {"low/__init__.py": "", "stray/__init__.py": "import low\n"})
    assert graph_module.unplaced(graph, LAYERS) == ["stray"]
