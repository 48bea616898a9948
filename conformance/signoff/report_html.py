"""``signoff.html``: one self-contained page (inline CSS and SVG, no script, no external resource).

Read top down: the verdict, what blocks a PASS (one line per backend), the backends, what is
not signed off here, the family matrix, changes since a baseline, the problems, the failures
grouped by cause (`failure_groups`), the expected skips and xfails with their reasons (a
release's page shows them first, before what blocks a PASS), then the tolerance headroom
(folded when something failed, so it never pushes the failures down), not applicable,
evidence, provenance and warnings. The cells and bars of a backend whose evidence is STALE
are hatched, pale and say "stale". Every string from a report is escaped: JUnit messages are
untrusted input.
"""

from __future__ import annotations

from html import escape
from typing import Any

from conformance.signoff.chart import headroom_svg, omitted_cases
from conformance.signoff.failure_groups import (
    FIRST_IDS,
    failure_groups,
    plain_message,
    where_messages_are,
)
from conformance.signoff.report_md import (
    BASELINE_KINDS,
    all_problems,
    all_warnings,
    blocking_lines,
    expectation_file_lines,
    family_cell,
    is_stale,
    provenance_text,
    shown_columns,
    shows_expected,
    source_text,
    with_code,
)

MAX_MESSAGE_CHARS = 4000
STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#1b1b1b;max-width:78rem}
table{border-collapse:collapse;margin:1rem 0}
th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f3f3f3}.n{text-align:right;white-space:nowrap}.why{min-width:16rem}
td.PASS,td.FAIL,td.INCOMPLETE,td.STALE,td.NOTRUN,td.MISSING{white-space:nowrap}
.PASS{background:#d9f2d9}.FAIL{background:#f8d0d0}.INCOMPLETE{background:#fde8c0}
.STALE{background:#fde8c0}.NOTRUN{background:#e6e6e6;color:#555}
.MISSING{background:#f3b0b0;font-weight:bold}
.verdict{display:inline-block;padding:.2rem .8rem;border-radius:.3rem}
.blocking{border-left:.4rem solid #c00;background:#fff3f3;padding:.5rem 1rem}
.clear{border-left:.4rem solid #2a2;background:#f3fff3;padding:.5rem 1rem}
.blocking li{margin:.2rem 0}
pre{background:#f7f7f7;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
code{font-size:.9em}.muted{color:#666}
td.stale{background:repeating-linear-gradient(135deg,#f1f1f1 0 5px,#e2e2e2 5px 10px);color:#666}
.stale-tag{font-size:.75em;font-weight:bold;color:#8a5a00;background:#fde8c0;
padding:0 .3em;border-radius:.2em;margin-left:.3em;text-transform:uppercase}
.group{border-left:.3rem solid #c00;padding:.1rem 0 .1rem .8rem;margin:1rem 0}
.group h3{margin:.2rem 0}.shape{font-family:monospace;font-size:.9em;color:#444}
details.chart>summary{cursor:pointer;font-weight:bold}
"""


def _status_class(backend: dict[str, Any]) -> str:
    status = backend["status"].replace(" ", "")
    return "MISSING" if status == "NOTRUN" and backend["required"] else status


def _family_class(counts: dict[str, int]) -> str:
    if counts.get("failed") or counts.get("error"):
        return "FAIL"
    ran = counts.get("passed") or counts.get("xfail") or counts.get("expected-skip")
    if counts.get("skipped") or (counts.get("unavailable") and ran):
        return "INCOMPLETE"
    return "PASS" if ran else "NOTRUN"


def _cell_class(backend: dict[str, Any], counts: dict[str, int]) -> str:
    """A cell's class; an INCOMPLETE backend's passes are never the green of a verified one."""
    family = _family_class(counts)
    return "INCOMPLETE" if family == "PASS" and backend["status"] == "INCOMPLETE" else family


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(item)}</li>" for item in items) + "</ul>"


def _head(document: dict[str, Any]) -> list[str]:
    verdict = escape(document["verdict"])
    blocking = blocking_lines(document)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>MLA conformance sign-off: {verdict}</title>",
        f"<style>{STYLE}</style></head><body>",
        f'<h1>MLA conformance sign-off: <span class="verdict {verdict}">{verdict}</span></h1>',
        f"<p>Generated {escape(document['generated_at'])} from "
        f"<code>{escape(document['reports_dir'])}</code>. Required backends: "
        f"<b>{escape(', '.join(document['required']) or 'none')}</b> "
        f"({escape(document['required_source'])}). Exit code {document['exit_code']}.</p>",
    ]
    if document.get("release"):
        parts += _expected(document)  # a release lists what the expectation files excuse first
    if blocking:
        parts.append('<div class="blocking"><b>What stops a PASS</b>' + _list(blocking) + "</div>")
    else:
        parts.append('<div class="clear">Nothing stops a PASS of the required backends.</div>')
    return parts


def _backends_table(document: dict[str, Any]) -> list[str]:
    columns = shown_columns(document)
    parts = [
        "<h2>Backends</h2><table><tr><th>backend</th><th>status</th><th>required</th>"
        "<th>source</th>"
        + "".join(f'<th class="n">{escape(label)}</th>' for _, label in columns)
        + '<th class="why">reason</th></tr>'
    ]
    for backend in document["backends"]:
        counts = backend["counts"]
        reason = with_code(backend["reason"], backend.get("code"))
        parts.append(
            f"<tr><td>{escape(backend['backend'])}</td>"
            f'<td class="{_status_class(backend)}">{escape(backend["status"])}</td>'
            f"<td>{'yes' if backend['required'] else 'no'}</td>"
            f"<td>{escape(source_text(backend))}</td>"
            + "".join(f'<td class="n">{counts.get(key, 0)}</td>' for key, _ in columns)
            + f'<td class="why">{escape(reason)}</td></tr>'
        )
    parts.append("</table>")
    return parts


def _not_signed_off(document: dict[str, Any]) -> list[str]:
    rows = document["not_signed_off"]
    if not rows:
        return ["<h2>Not signed off here</h2><p>Every backend is signed off.</p>"]
    items = "".join(
        f'<li><span class="verdict {"MISSING" if row["required"] else "NOTRUN"}">'
        f"{escape(row['backend'])}</span> {escape(row['status'])}"
        f"{' (required)' if row['required'] else ' (optional)'}: "
        f"{escape(with_code(row['reason'], row.get('code')))}</li>"
        for row in rows
    )
    return ["<h2>Not signed off here</h2><ul>" + items + "</ul>"]


STALE_TAG = '<span class="stale-tag">stale</span>'
STALE_NOTE = " Hatched, pale bars are STALE evidence: not a result of this checkout."


def _families(document: dict[str, Any]) -> list[str]:
    families = document["families"]
    if not families:
        return []
    parts = ["<h2>Backend × family</h2><table><tr><th>backend</th>"]
    parts += [f"<th>{escape(family)}</th>" for family in families]
    parts.append("</tr>")
    for backend in document["backends"]:
        stale = is_stale(backend)
        parts.append(f"<tr><td>{escape(backend['backend'])}{STALE_TAG if stale else ''}</td>")
        for family in families:
            counts = backend["families"].get(family, {})
            text = escape(family_cell(counts))
            if stale and counts:
                parts.append(f'<td class="stale">{text}{STALE_TAG}</td>')
            else:
                parts.append(f'<td class="{_cell_class(backend, counts)}">{text}</td>')
        parts.append("</tr>")
    parts.append("</table>")
    return parts


def _headroom(document: dict[str, Any]) -> list[str]:
    rows = [row for backend in document["backends"] for row in backend["headroom"]]
    missing = sum(backend["headroom_missing"] for backend in document["backends"])
    if not rows and not missing:
        return []
    stale = [backend["backend"] for backend in document["backends"] if is_stale(backend)]
    cases = len({row["case"] for row in rows})
    parts = [
        "<p>Measured error ÷ tolerance of each numerics case (the largest of its abs-or-rel "
        "and cosine figures, output and LSE); below 1 passes. One row per golden case: the "
        "worst of the tests that compared it (named when you point at the case)."
        + (STALE_NOTE if stale else "")
        + "</p>"
    ]
    names = [backend["backend"] for backend in document["backends"]]
    parts.append(headroom_svg(rows, names, stale=stale))
    omitted = omitted_cases(rows)
    notes = []
    if omitted:
        notes.append(f"{omitted} cases with more headroom are not drawn")
    if missing:
        notes.append(f"{missing} numerics cases recorded no tolerance and are not drawn")
    if notes:
        parts.append(f'<p class="muted">{escape("; ".join(notes))}.</p>')
    summary = f"Tolerance headroom ({cases} cases)" if rows else "Tolerance headroom"
    if not document["backends"] or not any(b["problems"] for b in document["backends"]):
        return [f"<h2>{summary}</h2>", *parts]
    return [
        f'<h2>Tolerance headroom</h2><details class="chart"><summary>{summary}: show the '
        "chart</summary>",
        *parts,
        "</details>",
    ]


def _baseline(document: dict[str, Any]) -> list[str]:
    baseline = document.get("baseline")
    if not baseline:
        return []
    parts = [
        f"<h2>Changes since {escape(baseline['file'])}</h2><p>Baseline of "
        f"{escape(baseline['generated_at'])}, verdict {escape(baseline['verdict'])}.</p>"
    ]
    if not baseline["backends"]:
        return [*parts, "<p>No test changed outcome; none was added or removed.</p>"]
    parts.append(
        "<table><tr><th>backend</th>"
        + "".join(f"<th>{escape(label)}</th>" for _, label in BASELINE_KINDS)
        + "</tr>"
    )
    for name, changes in baseline["backends"].items():
        cells = "".join(
            f"<td>{changes[key]['count']}"
            + (
                "<details><summary>ids</summary>" + _list(changes[key]["ids"]) + "</details>"
                if changes[key]["count"]
                else ""
            )
            + "</td>"
            for key, _ in BASELINE_KINDS
        )
        parts.append(f"<tr><td>{escape(name)}</td>{cells}</tr>")
    parts.append("</table>")
    return parts


def _message(message: str, files: list[str]) -> str:
    return plain_message(message or "(no message)", files)[:MAX_MESSAGE_CHARS]


def _failures(document: dict[str, Any]) -> list[str]:
    groups = failure_groups(document)
    if not groups:
        return []
    total = sum(group["count"] for group in groups)
    parts = [
        "<h2>Failures, errors and unexplained skips</h2>"
        f"<p>{total} in {len(groups)} group{'s' if len(groups) != 1 else ''} of one cause "
        "each (same backend, family and message, numbers and case ids aside; the same message "
        "across families is one group).</p>"
    ]
    for group in groups:
        first = group["first"]
        count = group["count"]
        what = f"{count} {escape(group['outcome'])}"
        ids = [f"<code>{escape(node_id)}</code>" for node_id in group["ids"][:FIRST_IDS]]
        more = count - len(ids)
        parts.append(
            f'<div class="group"><h3>{escape(group["backend"])} · {escape(group["family"])}: '
            f"{what}</h3>"
            + (f'<p class="shape">{escape(group["shape"])}</p>' if count > 1 else "")
            + f"<p>{'First: ' if more else ''}{', '.join(ids)}"
            + (f" and {more} more" if more else "")
            + "</p>"
            + (
                f"<details><summary>all {count} ids</summary>{_list(group['ids'])}</details>"
                if more
                else ""
            )
            + f"<pre>{escape(_message(first['message'], group['files']))}</pre>"
            + (
                f"<details><summary>details of the first</summary><pre>"
                f"{escape(_message(first['detail'], group['files']))}</pre></details>"
                if first["detail"] and first["detail"].strip() != first["message"].strip()
                else ""
            )
            + f'<p class="muted">{escape(where_messages_are(group))}</p></div>'
        )
    return parts


def _expected(document: dict[str, Any]) -> list[str]:
    """Each expected skip and xfail with its reason, and the expectation files used."""
    if not shows_expected(document):
        return []
    rows = document.get("expected_outcomes") or []
    parts = ["<h2>Expected skips and xfails</h2>"]
    if rows:
        parts.append(
            f"<p>{len(rows)} tests an expectation file excuses, each with its reason:</p>"
            "<table><tr><th>backend</th><th>test</th><th>outcome</th><th>reason</th></tr>"
            + "".join(
                f"<tr><td>{escape(row['backend'])}</td><td><code>{escape(row['id'])}</code></td>"
                f"<td>{escape(row['outcome'])}</td>"
                f"<td>{escape(row['reason'] or '(no reason)')}</td></tr>"
                for row in rows
            )
            + "</table>"
        )
    else:
        parts.append("<p>No test is skipped or xfailed by an expectation file.</p>")
    files = expectation_file_lines(document)
    if files:
        parts += ["<p>Expectation files the runs used:</p>", _list(files)]
    return parts


def _not_applicable(document: dict[str, Any]) -> list[str]:
    """Per backend with not-applicable tests: their count and reasons, folded."""
    parts = [
        _not_applicable_backend(backend["backend"], backend["not_applicable"])
        for backend in document["backends"]
        if backend["not_applicable"]
    ]
    return ["<h2>Not applicable</h2>", *parts] if parts else []


def _not_applicable_backend(name: str, cases: list[dict[str, Any]]) -> str:
    reasons = sorted({case["message"] for case in cases})
    return (
        f"<details><summary>{escape(name)}: {len(cases)} not applicable"
        f"</summary>{_list(reasons)}</details>"
    )


def render_html(document: dict[str, Any]) -> str:
    """The HTML report of a sign-off document (see `report_json.signoff_document`)."""
    parts = [
        *_head(document),
        *_backends_table(document),
        *_not_signed_off(document),
        *_families(document),
        *_baseline(document),
    ]
    problems = all_problems(document)
    if problems:
        parts += ["<h2>Problems</h2>", _list(problems)]
    parts += _failures(document)
    parts += [] if document.get("release") else _expected(document)
    parts += [*_headroom(document), *_not_applicable(document)]
    parts += ["<h2>Evidence and provenance</h2>", _list(provenance_text(document))]
    warnings = all_warnings(document)
    if warnings:
        parts += ["<h2>Warnings</h2>", _list(warnings)]
    parts.append("</body></html>\n")
    return "\n".join(parts)
