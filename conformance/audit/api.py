"""The audits as functions over paths: `find_construction_sites`, `audit_construction`,
`audit_stubs` (each runs the engine over a tree; the audits themselves never import it)."""

from __future__ import annotations

from typing import Any

from conformance.audit.config import Config
from conformance.audit.construction import ConstructionSite, Definitions, TreeParseError, iter_sites
from conformance.audit.engine import build_index, run_audit
from conformance.audit.findings import Finding
from conformance.audit.loader import Options
from conformance.audit.protocol import LayerProtocol


def find_construction_sites(
    root: Any, *, exclude: Any = (), strict: bool = True
) -> list[ConstructionSite]:
    """Every construction site under `root` (a path or several), bound to its definition.

    With `strict`, a tree with named problems raises `TreeParseError`.
    """
    paths = [root] if isinstance(root, (str, bytes)) or hasattr(root, "__fspath__") else list(root)
    index, problems = build_index(paths, Config(exclude=tuple(exclude)), Options(jobs=1))
    if strict and problems:
        raise TreeParseError(problems)
    defs = Definitions(index)
    return [site for _, _, _, site in iter_sites(index, defs)]


def audit_construction(root: Any, *, exclude: Any = ()) -> list[Finding]:
    """The construction findings (all severities, noqa applied) under `root`."""
    paths = [root] if isinstance(root, (str, bytes)) or hasattr(root, "__fspath__") else list(root)
    return run_audit(paths, audits=("construction",), exclude=exclude).findings


def audit_stubs(
    root: Any, protocol: LayerProtocol | None = None, *, exclude: Any = ()
) -> list[Finding]:
    """The stub findings (all severities, noqa applied) under `root`; with `protocol`,
    every layer stub is judged against it."""
    paths = [root] if isinstance(root, str) or hasattr(root, "__fspath__") else list(root)
    return run_audit(paths, audits=("stubs",), protocol=protocol, exclude=exclude).findings
