"""``signoff.html``: one self-contained page (inline CSS, no script, no external resource).

Every string from a report is escaped: JUnit messages are untrusted input.
"""

from __future__ import annotations

from html import escape
from typing import Any

from conformance.signoff.report_md import COUNT_COLUMNS, family_cell, source_text

MAX_MESSAGE_CHARS = 4000
STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#1b1b1b;max-width:80rem}
table{border-collapse:collapse;margin:1rem 0}
th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f3f3f3}
.PASS{background:#d9f2d9}.FAIL{background:#f8d0d0}.INCOMPLETE{background:#fde8c0}
.NOTRUN{background:#e6e6e6}
.verdict{display:inline-block;padding:.2rem .8rem;border-radius:.3rem}
pre{background:#f7f7f7;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
code{font-size:.9em}
"""


def _status_class(status: str) -> str:
    return status.replace(" ", "")


def _family_class(counts: dict[str, int]) -> str:
    if counts.get("failed") or counts.get("error"):
        return "FAIL"
    ran = counts.get("passed") or counts.get("xfail") or counts.get("expected-skip")
    if counts.get("skipped") or (counts.get("unavailable") and ran):
        return "INCOMPLETE"
    return "PASS" if ran else "NOTRUN"


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(item)}</li>" for item in items) + "</ul>"


def render_html(document: dict[str, Any]) -> str:
    """The HTML report of a sign-off document (see `report_json.signoff_document`)."""
    verdict = escape(document["verdict"])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>MLA conformance sign-off: {verdict}</title>",
        f"<style>{STYLE}</style></head><body>",
        f'<h1>MLA conformance sign-off: <span class="verdict {_status_class(verdict)}">'
        f"{verdict}</span></h1>",
        f"<p>Generated {escape(document['generated_at'])} from "
        f"<code>{escape(document['reports_dir'])}</code>. Required backends: "
        f"{escape(', '.join(document['required']) or 'none')} "
        f"({escape(document['required_source'])}). Exit code {document['exit_code']}.</p>",
        "<h2>Backends</h2><table><tr><th>backend</th><th>status</th><th>required</th>"
        "<th>source</th>"
        + "".join(f"<th>{escape(label)}</th>" for _, label in COUNT_COLUMNS)
        + "<th>reason</th></tr>",
    ]
    for backend in document["backends"]:
        counts = backend["counts"]
        parts.append(
            f"<tr><td>{escape(backend['backend'])}</td>"
            f'<td class="{_status_class(backend["status"])}">{escape(backend["status"])}</td>'
            f"<td>{'yes' if backend['required'] else 'no'}</td>"
            f"<td>{escape(source_text(backend))}</td>"
            + "".join(f"<td>{counts.get(key, 0)}</td>" for key, _ in COUNT_COLUMNS)
            + f"<td>{escape(backend['reason'])}</td></tr>"
        )
    parts.append("</table>")
    families = document["families"]
    if families:
        parts.append("<h2>Backend × family</h2><table><tr><th>backend</th>")
        parts += [f"<th>{escape(family)}</th>" for family in families]
        parts.append("</tr>")
        for backend in document["backends"]:
            parts.append(f"<tr><td>{escape(backend['backend'])}</td>")
            for family in families:
                counts = backend["families"].get(family, {})
                parts.append(
                    f'<td class="{_family_class(counts)}">{escape(family_cell(counts))}</td>'
                )
            parts.append("</tr>")
        parts.append("</table>")
    problems = list(document["errors"])
    for backend in document["backends"]:
        problems += [f"{backend['backend']}: {issue}" for issue in backend["issues"]]
    if problems:
        parts += ["<h2>Problems</h2>", _list(problems)]
    failing = [(b["backend"], case) for b in document["backends"] for case in b["problems"]]
    if failing:
        parts.append("<h2>Failures, errors and unexplained skips</h2>")
        for backend_name, case in failing:
            parts.append(
                f"<h3>{escape(backend_name)}: <code>{escape(case['id'])}</code> "
                f"({escape(case['outcome'])}, {escape(case['source'])})</h3>"
                f"<pre>{escape((case['message'] or '(no message)')[:MAX_MESSAGE_CHARS])}</pre>"
            )
            if case["properties"]:
                parts.append(
                    "<p>Properties: "
                    + escape(", ".join(f"{k}={v}" for k, v in sorted(case["properties"].items())))
                    + "</p>"
                )
            if case["detail"]:
                parts.append(
                    f"<details><summary>details</summary><pre>"
                    f"{escape(case['detail'][:MAX_MESSAGE_CHARS])}</pre></details>"
                )
    parts.append(
        "<h2>Provenance</h2><table><tr><th>backend</th><th>file</th><th>device</th>"
        "<th>versions</th><th>python</th><th>commit</th><th>run</th></tr>"
    )
    for backend in document["backends"]:
        if backend["evidence"]:
            evidence = backend["evidence"]
            facts = evidence.get("facts") or {}
            parts.append(
                f"<tr><td>{escape(backend['backend'])}</td><td colspan=6>evidence of "
                f"{escape(str(evidence['date']))} from <code>{escape(str(evidence['path']))}"
                f"</code>: {escape(str(facts.get('source', 'source not recorded')))}</td></tr>"
            )
        if not backend["provenance"]:
            parts.append(
                f"<tr><td>{escape(backend['backend'])}</td>"
                f"<td colspan=6>{escape(backend['reason'])}</td></tr>"
            )
        for run in backend["provenance"]:
            versions = run.get("versions") or {}
            version_text = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
            parts.append(
                f"<tr><td>{escape(backend['backend'])}</td><td>{escape(run['file'])}</td>"
                f"<td>{escape(str(run.get('device') or 'unknown'))}</td>"
                f"<td>{escape(version_text or 'unknown')}</td>"
                f"<td>{escape(str(run.get('python') or '?'))}</td>"
                f"<td>{escape(str(run.get('git_commit') or 'unknown'))}</td>"
                f"<td>{escape(str(run.get('started') or '?'))} → "
                f"{escape(str(run.get('finished_at') or 'not finished'))}</td></tr>"
            )
    parts.append("</table>")
    warnings = list(document["warnings"])
    for backend in document["backends"]:
        warnings += [f"{backend['backend']}: {warning}" for warning in backend["warnings"]]
        warnings += [
            f"{backend['backend']}: stale expectation {entry} matches no test"
            for entry in backend["stale_expectations"]
        ]
    if warnings:
        parts += ["<h2>Warnings</h2>", _list(warnings)]
    parts.append("</body></html>\n")
    return "\n".join(parts)
