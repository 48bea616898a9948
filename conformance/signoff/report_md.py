"""``signoff.md``: the sign-off for people (also what ``python -m conformance signoff`` prints)."""

from __future__ import annotations

import re
from typing import Any

COUNT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("passed", "passed"),
    ("failed", "failed"),
    ("error", "error"),
    ("xfail", "xfail"),
    ("expected-skip", "expected skip"),
    ("skipped", "unexplained skip"),
    ("unavailable", "unavailable"),
)
MAX_MESSAGE_CHARS = 1500


def cell(text: object) -> str:
    """Text made safe for one Markdown table cell."""
    return re.sub(r"\s+", " ", str(text)).replace("|", "\\|").strip()


def fenced(text: str) -> str:
    """A fenced code block that no backtick run in ``text`` can close early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def family_cell(counts: dict[str, int]) -> str:
    """``12 passed, 1 xfail`` for one backend × family cell."""
    parts = [f"{counts[key]} {label}" for key, label in COUNT_COLUMNS if counts.get(key)]
    return ", ".join(parts) if parts else "–"


def source_text(backend: dict[str, Any]) -> str:
    """``local`` or ``evidence 2026-05-01``."""
    evidence = backend.get("evidence")
    if evidence:
        return f"evidence {evidence['date']}"
    return "–" if backend["source"] == "none" else backend["source"]


def render_markdown(document: dict[str, Any]) -> str:
    """The Markdown report of a sign-off document (see `report_json.signoff_document`)."""
    lines = [
        f"# MLA conformance sign-off: {document['verdict']}",
        "",
        f"Generated {document['generated_at']} from `{document['reports_dir']}`. "
        f"Required backends: {', '.join(document['required']) or 'none'} "
        f"({document['required_source']}).",
        "",
        "| backend | status | required | source | "
        + " | ".join(label for _, label in COUNT_COLUMNS)
        + " | reason |",
        "|---" * (5 + len(COUNT_COLUMNS)) + "|",
    ]
    for backend in document["backends"]:
        counts = backend["counts"]
        lines.append(
            f"| {backend['backend']} | **{backend['status']}** | "
            f"{'yes' if backend['required'] else 'no'} | {cell(source_text(backend))} | "
            + " | ".join(str(counts.get(key, 0)) for key, _ in COUNT_COLUMNS)
            + f" | {cell(backend['reason'])} |"
        )
    families = document["families"]
    if families:
        lines += ["", "## Backend × family", ""]
        lines.append("| backend | " + " | ".join(families) + " |")
        lines.append("|---" * (len(families) + 1) + "|")
        for backend in document["backends"]:
            row = [family_cell(backend["families"].get(family, {})) for family in families]
            lines.append(f"| {backend['backend']} | " + " | ".join(row) + " |")
    problems = list(document["errors"])
    for backend in document["backends"]:
        problems += [f"{backend['backend']}: {issue}" for issue in backend["issues"]]
    if problems:
        lines += ["", "## Problems", ""] + [f"- {cell(problem)}" for problem in problems]
    failing = [(b["backend"], case) for b in document["backends"] for case in b["problems"]]
    if failing:
        lines += ["", "## Failures, errors and unexplained skips", ""]
        for backend_name, case in failing:
            lines.append(
                f"### {backend_name}: `{cell(case['id'])}` ({case['outcome']}, {case['source']})"
            )
            message = case["message"] or "(no message)"
            lines += ["", fenced(message[:MAX_MESSAGE_CHARS])]
            if case["properties"]:
                figures = ", ".join(f"{k}={v}" for k, v in sorted(case["properties"].items()))
                lines += ["", f"Properties: {cell(figures)}"]
            lines.append("")
    not_run = [b for b in document["backends"] if b["status"] == "NOT RUN"]
    if not_run:
        lines += ["", "## Not run", ""]
        lines += [
            f"- {b['backend']}{' (required)' if b['required'] else ''}: {cell(b['reason'])}"
            for b in not_run
        ]
    lines += ["", "## Provenance", ""]
    for backend in document["backends"]:
        if backend["evidence"]:
            evidence = backend["evidence"]
            facts = evidence.get("facts") or {}
            lines.append(
                f"- {backend['backend']}: evidence of {evidence['date']} from "
                f"`{evidence['path']}` ({cell(facts.get('source', 'source not recorded'))})"
            )
        for run in backend["provenance"]:
            versions = run.get("versions") or {}
            version_text = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
            device = cell(run.get("device") or "unknown")
            lines.append(
                f"- {backend['backend']} `{cell(run['file'])}`: device {device}; "
                f"{cell(version_text or 'versions unknown')}; python {run.get('python') or '?'}; "
                f"commit {run.get('git_commit') or 'unknown'}; "
                f"{run.get('started') or '?'} → {run.get('finished_at') or 'not finished'}"
            )
    warnings = list(document["warnings"])
    for backend in document["backends"]:
        warnings += [f"{backend['backend']}: {warning}" for warning in backend["warnings"]]
        warnings += [
            f"{backend['backend']}: stale expectation {entry} matches no test"
            for entry in backend["stale_expectations"]
        ]
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {cell(warning)}" for warning in warnings]
    lines += ["", f"**Verdict: {document['verdict']}** (exit code {document['exit_code']})", ""]
    return "\n".join(lines)
