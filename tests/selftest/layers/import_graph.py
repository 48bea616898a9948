"""The suite's import graph, read with `ast` (function-level and type-checking imports count),
and the two rules it must keep: no circle, no arrow running back up the layers."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layer:
    """Packages (or modules) on one floor; ``peers`` lets them import each other (acyclic)."""

    members: tuple[str, ...]
    peers: bool = False


# Bottom to top, as docs/layout.md says. A package may import its own floor's peers only
# where ``peers`` is set, and any floor below.
LAYERS: tuple[Layer, ...] = (
    Layer(("conformance.aiter_kernels",)),  # a vendor's kernel tables, read by applicability
    Layer(("conformance.target_types",)),  # what a declaration is, read by conformance.targets
    Layer(
        (
            "conformance.errors",
            "conformance.targets",
            "conformance.rule_table",
            "conformance.applicability",
            "conformance.native_calls",
        )
    ),
    Layer(
        (
            "conformance.metadata",
            "conformance.stubs",
            "conformance.persistent",
            "conformance.numerics",
        ),
        peers=True,
    ),
    Layer(("kernels",)),
    Layer(("backends",)),
    Layer(("conformance.runs",)),
    Layer(("conformance.engines",)),
    Layer(
        (
            "conformance.harness",
            "conformance.goldens",
            "conformance.signoff",
            "conformance.audit",
            "conformance.ci",
        ),
    ),
    Layer(("conformance.cli", "conformance.__main__", "conformance"), peers=True),
)
PACKAGES: tuple[str, ...] = ("conformance", "backends", "kernels")
EXACT_ONLY: frozenset[str] = frozenset({"conformance"})
"""Members that stand for their own module only (``conformance/__init__.py``), not for the
packages below them, which each need a floor of their own."""


def modules_of(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, node: ast.AST) -> list[str]:
    """The dotted names one import statement asks for (submodules where it names them)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """``{module: modules it imports}`` within ``packages`` (parents' ``__init__`` implied)."""
    modules = modules_of(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            wanted = _imported(name, path, node)
            if isinstance(node, ast.ImportFrom) and len(wanted) > 1:
                # ``from pkg import sub`` imports the submodule; ``from mod import f``, mod
                submodules = [target for target in wanted[1:] if target in modules]
                wanted = submodules if len(submodules) == len(wanted) - 1 else wanted[:1]
                wanted += submodules
            for target in wanted:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def package_of(module: str, layers: Sequence[Layer] = LAYERS) -> str:
    """The most specific layer member ``module`` belongs to (itself if none)."""
    members = [m for layer in layers for m in layer.members]
    owning = [
        m for m in members if module == m or (m not in EXACT_ONLY and module.startswith(m + "."))
    ]
    return max(owning, key=len) if owning else module


def package_graph(graph: Mapping[str, set[str]], layers: Sequence[Layer] = LAYERS) -> dict:
    """The import graph between layer members (packages)."""
    result: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            a, b = package_of(source, layers), package_of(target, layers)
            result.setdefault(a, set())
            if a != b:
                result[a].add(b)
    return result


def inner_package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The import graph one level inside the top packages: between their packages and
    top-level modules (``kernels.triton_mla``, ``kernels.gluon_mla``, ``kernels.plan_slice``),
    which may share a floor's member and still must import one way."""

    def inner(module: str) -> str:
        return ".".join(module.split(".")[:2])

    result: dict[str, set[str]] = {}
    for source, targets in graph.items():
        result.setdefault(inner(source), set())
        for target in targets:
            if inner(target) != inner(source):
                result[inner(source)].add(inner(target))
    return result


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_arrows(graph: Mapping[str, set[str]], layers: Sequence[Layer] = LAYERS) -> list[str]:
    """``a -> b`` for every import of a package from a higher floor, or of a peer where the
    floor has no peers, naming one module pair that does it."""
    floor = {member: level for level, layer in enumerate(layers) for member in layer.members}
    wrong = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = package_of(source, layers), package_of(target, layers)
            if a == b or a not in floor or b not in floor:
                continue
            up = floor[b] > floor[a]
            if up or (floor[a] == floor[b] and not layers[floor[a]].peers):
                wrong.append(f"{a} -> {b} ({source} imports {target})")
    return wrong


def unplaced(graph: Mapping[str, set[str]], layers: Sequence[Layer] = LAYERS) -> list[str]:
    """Modules on no floor (a new package must be given one)."""
    members = {m for layer in layers for m in layer.members}
    return sorted(module for module in graph if package_of(module, layers) not in members)
