"""Static source-tree audits: `CommonAttentionMetadata` construction sites and layer stubs.

They read source, never import it (nor torch: the audit runs on a bare interpreter), so
they run on any tree: this repository, a vLLM checkout, a fork. `run_audit` runs them and
returns an `AuditReport`; the command line is `conformance.audit.cli`
(``python -m conformance audit``); docs/audit.md documents both.
"""

from __future__ import annotations

from conformance.audit.api import audit_construction, audit_stubs, find_construction_sites
from conformance.audit.config import Config, ConfigError, load_config
from conformance.audit.construction import ConstructionSite, TreeParseError
from conformance.audit.engine import AUDITS, run_audit
from conformance.audit.findings import RULES, Finding, Problem
from conformance.audit.loader import Options
from conformance.audit.protocol import LayerProtocol, ProtocolFileError, load_protocol_file
from conformance.audit.report import AuditReport
from conformance.audit.tree import AuditPathError

__all__ = [
    "AUDITS",
    "RULES",
    "AuditPathError",
    "AuditReport",
    "Config",
    "ConfigError",
    "ConstructionSite",
    "Finding",
    "LayerProtocol",
    "Options",
    "Problem",
    "ProtocolFileError",
    "TreeParseError",
    "audit_construction",
    "audit_stubs",
    "find_construction_sites",
    "load_config",
    "load_protocol_file",
    "run_audit",
]
