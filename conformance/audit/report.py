"""One audit run's results and their renderings: text lines, JSON, SARIF 2.1.0.

Exit status: 2 when any named problem was met or on a usage error (the rest of the tree is
still audited and reported), else 1 when a finding at or above ``fail-on`` (default
``error``) remains after configuration, ``# noqa`` and the baseline, else 0.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from conformance.audit.baseline import fingerprint
from conformance.audit.findings import RULES, SEVERITIES, Finding, Problem
from conformance.audit.sites import VLLM, EngineSites

SCHEMA_VERSION = 2
_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@dataclass
class AuditReport:
    """Everything one audit run found, plus what it audited against."""

    findings: list[Finding] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files_audited: int = 0
    audits: tuple[str, ...] = ()
    fail_on: str = "error"
    known: int = 0
    """Findings the baseline already lists (not shown, never fail)."""
    suppressed: int = 0
    """Findings silenced by ``# noqa``."""
    context: dict[str, Any] = field(default_factory=dict)
    """Provenance: definition, builders, consumers, configuration."""
    sites: EngineSites = VLLM
    """The engine the tree was judged as: its rules are the ones SARIF lists."""

    @property
    def errors(self) -> list[Problem]:
        """The named problems (older name)."""
        return self.problems

    def failing(self) -> list[Finding]:
        limit = SEVERITIES.index(self.fail_on)
        return [f for f in self.findings if SEVERITIES.index(f.severity) <= limit]

    @property
    def exit_code(self) -> int:
        if self.problems:
            return 2
        return 1 if self.failing() else 0

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (f.path, f.line, f.col, f.code))

    def _sorted_problems(self) -> list[Problem]:
        return sorted(self.problems, key=lambda p: (p.path, p.line, p.name))

    def summary(self) -> str:
        """One line of counts, for stderr."""
        counts = {level: sum(f.severity == level for f in self.findings) for level in SEVERITIES}
        parts = [
            _plural(counts["error"], "error"),
            _plural(counts["warning"], "warning"),
            f"{counts['info']} info",
            _plural(len(self.problems), "problem"),
            _plural(self.files_audited, "file") + " audited",
        ]
        if self.known:
            parts.append(f"{self.known} known from the baseline")
        if self.suppressed:
            parts.append(f"{self.suppressed} silenced by noqa")
        return "audit: " + ", ".join(parts) + f" (exit {self.exit_code})"

    def to_text(self) -> str:
        """Problems first, then findings, one per line."""
        lines = [p.to_text() for p in self._sorted_problems()]
        lines += [f.to_text() for f in self.sorted_findings()]
        return "\n".join(lines)

    def to_json(self) -> str:
        """The report as JSON (schema in docs/audit.md)."""
        here = os.getcwd()
        document = {
            "version": SCHEMA_VERSION,
            "exit_code": self.exit_code,
            "fail_on": self.fail_on,
            "audits": list(self.audits),
            "files_audited": self.files_audited,
            "known": self.known,
            "suppressed": self.suppressed,
            "findings": [
                {**f.to_json(), "fingerprint": fingerprint(f, here)} for f in self.sorted_findings()
            ],
            "problems": [p.to_json() for p in self._sorted_problems()],
            **self.context,
        }
        return json.dumps(document, indent=2)

    def to_sarif(self) -> str:
        """The report as a SARIF 2.1.0 log (one run; problems as tool notifications)."""
        here = os.getcwd()
        sites = self.sites
        rules = [
            {
                "id": rule.code,
                "shortDescription": {"text": rule.summary_for(sites.record, sites.layer)},
                "defaultConfiguration": {"level": _SARIF_LEVEL[rule.severity]},
                "helpUri": "docs/audit.md",
            }
            for rule in (RULES[code] for code in sites.rules)
        ]
        index = {code: n for n, code in enumerate(sites.rules)}
        results = [
            {
                "ruleId": f.code,
                "ruleIndex": index[f.code],
                "level": _SARIF_LEVEL[f.severity],
                "message": {"text": f.message},
                "locations": [_location(f.path, f.line, f.col + 1)],
                "partialFingerprints": {"mlaConformanceAudit/v1": fingerprint(f, here)},
            }
            for f in self.sorted_findings()
        ]
        notifications = [
            {
                "level": "error",
                "message": {"text": f"{p.name}: {p.message}"},
                "descriptor": {"id": p.name},
                "locations": [_location(p.path, p.line, 1)],
            }
            for p in self._sorted_problems()
        ]
        log = {
            "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
            "version": "2.1.0",
            "runs": [
                {
                    "tool": {"driver": {"name": "mla-conformance-audit", "rules": rules}},
                    "invocations": [
                        {
                            "executionSuccessful": not self.problems,
                            "exitCode": self.exit_code,
                            "toolExecutionNotifications": notifications,
                        }
                    ],
                    "results": results,
                }
            ],
        }
        return json.dumps(log, indent=2)


def _location(path: str, line: int, column: int) -> dict[str, Any]:
    region = {"startLine": max(line, 1), "startColumn": max(column, 1)}
    uri = path.replace(os.sep, "/")
    return {"physicalLocation": {"artifactLocation": {"uri": uri}, "region": region}}
