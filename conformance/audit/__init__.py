"""Static source-tree audits: `CommonAttentionMetadata` construction sites and layer stubs.

They read source, never import it, so they run on any tree (this repository, a vLLM
checkout, a fork). `run_audit` runs both and returns an `AuditReport`; the command line is
`conformance.audit.cli` (``python -m conformance audit``); docs/audit.md documents both.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from conformance.audit.construction import (
    CamDefinition,
    ConstructionSite,
    audit_construction,
    find_construction_sites,
    resolve_definition,
)
from conformance.audit.findings import AuditReport, Finding, ParseFailure
from conformance.audit.protocol import (
    LayerProtocol,
    ProtocolFileError,
    default_protocol,
    load_protocol_file,
)
from conformance.audit.stubs import audit_stubs
from conformance.audit.tree import AuditPathError, TreeParseError, load_tree

AUDITS: tuple[str, ...] = ("construction", "stubs")

__all__ = [
    "AUDITS",
    "AuditPathError",
    "AuditReport",
    "CamDefinition",
    "ConstructionSite",
    "Finding",
    "LayerProtocol",
    "ParseFailure",
    "ProtocolFileError",
    "TreeParseError",
    "audit_construction",
    "audit_stubs",
    "find_construction_sites",
    "resolve_definition",
    "run_audit",
]


def run_audit(
    paths: Sequence[str | os.PathLike[str]],
    *,
    audits: Sequence[str] = AUDITS,
    protocol: LayerProtocol | None = None,
    protocol_file: str | os.PathLike[str] | None = None,
    exclude: Sequence[str] = (),
) -> AuditReport:
    """Run `audits` over `paths` and collect one report.

    The layer protocol is `protocol`, else the file `protocol_file`, else the registered
    backends' (`protocol.default_protocol`). Raises `AuditPathError` for a missing PATH and
    `ProtocolFileError` for a bad protocol file; files that do not parse are reported in
    `AuditReport.errors`, not raised.
    """
    unknown = sorted(set(audits) - set(AUDITS))
    if unknown:
        raise ValueError(f"audits: expected some of {list(AUDITS)}, found {unknown}")
    if "stubs" in audits and protocol is None:
        protocol = load_protocol_file(protocol_file) if protocol_file else default_protocol()
    tree = load_tree(paths, exclude)
    report = AuditReport(
        errors=list(tree.failures),
        files_audited=len(tree.files),
        audits=tuple(a for a in AUDITS if a in audits),
    )
    if "construction" in audits:
        resolved = resolve_definition(tree)
        definition = resolved.definition
        report.findings += resolved.warnings
        report.findings += audit_construction(tree, definition)
        report.context["definition"] = {
            "source": definition.source,
            "fields": list(definition.fields),
            "needed": list(definition.needed),
            "deprecated": sorted(definition.deprecated),
        }
    if "stubs" in audits and protocol is not None:
        report.findings += audit_stubs(tree, protocol)
        report.context["protocol"] = protocol.to_json()
    return report
