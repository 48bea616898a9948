"""``signoff.md``: the sign-off for people, in the same order as the HTML page.

Failures come grouped by cause (`conformance.signoff.failure_groups`) before the headroom
table; the family cells and headroom rows of a backend whose evidence is STALE say so. Each
expected skip and xfail is listed with its reason and the expectation files the runs used
(after the failures; first of all on a release sign-off's page).
"""

from __future__ import annotations

import re
from typing import Any

from conformance.signoff.checks import UNCOMMITTED_EXPECTATIONS
from conformance.signoff.failure_groups import (
    FIRST_IDS,
    failure_groups,
    plain_message,
    where_messages_are,
)

COUNT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("passed", "passed"),
    ("failed", "failed"),
    ("error", "error"),
    ("xfail", "xfail"),
    ("expected-skip", "expected skip"),
    ("not-applicable", "not applicable"),
    ("skipped", "unexplained"),
    ("unavailable", "unavailable"),
)
BASELINE_KINDS: tuple[tuple[str, str], ...] = (
    ("newly_failing", "newly failing"),
    ("newly_passing", "newly passing"),
    ("added", "tests added"),
    ("removed", "tests removed"),
)
ALWAYS_SHOWN = frozenset({"passed", "failed", "not-applicable", "skipped"})
MAX_MESSAGE_CHARS = 1500
HEADROOM_ROWS = 10


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
    """``local``, or ``evidence 2026-05-01 @ 4a22981 (STALE)``."""
    evidence = backend.get("evidence")
    if evidence:
        commit = (evidence.get("commit") or "commit unknown")[:12]
        dirty = " (uncommitted changes)" if evidence.get("dirty") else ""
        stale = " (STALE)" if evidence.get("stale") else ""
        return f"evidence {evidence['date']} @ {commit}{dirty}{stale}"
    return "–" if backend["source"] == "none" else backend["source"]


def with_code(text: str, code: str | None) -> str:
    """``[SIGN007] text`` (the code of the sign-off check that raised it), or the text."""
    return f"[{code}] {text}" if code else text


def _codes(document: dict[str, Any], key: str, count: int) -> list[str | None]:
    codes = document.get(key) or []
    return [*codes, *[None] * (count - len(codes))][:count]


def blocking_lines(document: dict[str, Any]) -> list[str]:
    """What stops a PASS, one line each, with its check's code."""
    lines = document["blocking"]
    return list(map(with_code, lines, _codes(document, "blocking_codes", len(lines))))


def all_problems(document: dict[str, Any]) -> list[str]:
    """Every sign-off error and backend issue, one line each, with its check's code."""
    errors = document["errors"]
    problems = list(map(with_code, errors, _codes(document, "error_codes", len(errors))))
    for backend in document["backends"]:
        issues = backend["issues"]
        codes = _codes(backend, "issue_codes", len(issues))
        problems += [
            with_code(f"{backend['backend']}: {issue}", code)
            for issue, code in zip(issues, codes, strict=True)
        ]
    return problems


def all_warnings(document: dict[str, Any]) -> list[str]:
    """Every warning, stale expectation entries included."""
    warnings = list(document["warnings"])
    for backend in document["backends"]:
        warnings += [f"{backend['backend']}: {warning}" for warning in backend["warnings"]]
        warnings += [
            f"{backend['backend']}: stale expectation {entry} matches no test"
            for entry in backend["stale_expectations"]
        ]
    return warnings


def provenance_text(document: dict[str, Any]) -> list[str]:
    """One line per evidence directory and per run: device, versions, commit, time."""
    lines = []
    for backend in document["backends"]:
        evidence = backend["evidence"]
        if evidence:
            facts = evidence.get("facts") or {}
            stale = evidence.get("stale") or []
            state = ("STALE: " + "; ".join(stale)) if stale else "current: no file changed since"
            dirty = " with uncommitted changes" if evidence.get("dirty") else ""
            lines.append(
                f"{backend['backend']}: evidence of {evidence['date']} at commit "
                f"{evidence.get('commit') or 'unknown'}{dirty} from {evidence['path']} "
                f"({facts.get('source', 'source not recorded')}); {state}"
            )
        for run in backend["provenance"]:
            versions = run.get("versions") or {}
            version_text = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
            gpus = ", ".join(str(name) for name in run.get("gpus") or [])
            dirty = " with uncommitted changes" if run.get("git_dirty") is True else ""
            lines.append(
                f"{backend['backend']} {run['file']}: device {run.get('device') or 'unknown'}"
                f" ({run.get('device_kind') or 'kind not recorded'})"
                + (f", GPUs {gpus}" if gpus else "")
                + f"; {version_text or 'versions unknown'}; python {run.get('python') or '?'}; "
                f"commit {run.get('git_commit') or 'unknown'}{dirty}; {run_times(run)}"
            )
    return lines


def run_times(run: dict[str, Any]) -> str:
    """``<started> → <finished_at>``; what the sidecar says when it records no times (an
    engine session's records whether the run finished and its exit status only)."""
    finished = run.get("finished") is True
    exit_text = f" (exit {run['exitstatus']})" if run.get("exitstatus") is not None else ""
    end = run.get("finished_at") or (
        f"finished{exit_text}, time not recorded" if finished else "not finished"
    )
    if run.get("started"):
        return f"{run['started']} → {end}"
    if run.get("finished_at"):
        return f"start not recorded → {end}"
    return f"finished{exit_text}; start and end times not recorded" if finished else end


def expectation_file_lines(document: dict[str, Any]) -> list[str]:
    """One line per expectation file the runs of a backend used: its sha256 and standing."""
    lines = []
    for backend in document["backends"]:
        for row in backend.get("expectation_files") or []:
            if row.get("engine"):
                sha, standing = "not recorded", "an engine run: the sign-off applies the "
                standing += "repository's file to its skips"
            elif not row["recorded"]:
                sha, standing = "not recorded", "taken as the repository's by its path"
            else:
                sha = (row["sha256"] or "none: no such file")[:12]
                standing = (
                    "the plug-in's own file, listed here entry by entry"
                    if not row["builtin"]
                    else "the repository's committed file"
                    if row["repository"]
                    else f"NOT the repository's committed file ({UNCOMMITTED_EXPECTATIONS.code})"
                )
            lines.append(
                f"{backend['backend']} ({', '.join(row['runs'])}): "
                f"{row['file'] or 'no file recorded'} (sha256 {sha}): {standing}"
            )
    return lines


def shows_expected(document: dict[str, Any]) -> bool:
    """Whether the expected skips and xfails get a section: there are some, a plug-in brought
    its own file, or the sign-off is a release's (which lists them first, even none)."""
    plugin_files = any(
        not row["builtin"]
        for backend in document["backends"]
        for row in backend.get("expectation_files") or []
    )
    return bool(document.get("expected_outcomes") or plugin_files or document.get("release"))


def _expected(document: dict[str, Any]) -> list[str]:
    if not shows_expected(document):
        return []
    rows = document.get("expected_outcomes") or []
    lines = ["", "## Expected skips and xfails", ""]
    if rows:
        lines += [
            f"{len(rows)} tests an expectation file excuses, each with its reason:",
            "",
            "| backend | test | outcome | reason |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {cell(row['backend'])} | `{cell(row['id'])}` | {cell(row['outcome'])} | "
            f"{cell(row['reason'] or '(no reason)')} |"
            for row in rows
        ]
    else:
        lines.append("No test is skipped or xfailed by an expectation file.")
    files = expectation_file_lines(document)
    if files:
        lines += ["", "Expectation files the runs used:", ""] + [f"- {cell(f)}" for f in files]
    return lines


def shown_columns(document: dict[str, Any]) -> list[tuple[str, str]]:
    """The count columns worth a column: the `ALWAYS_SHOWN`, and any other that is not 0."""
    return [
        (key, label)
        for key, label in COUNT_COLUMNS
        if key in ALWAYS_SHOWN or any(b["counts"].get(key) for b in document["backends"])
    ]


def _table(document: dict[str, Any]) -> list[str]:
    columns = shown_columns(document)
    lines = [
        "| backend | status | required | source | "
        + " | ".join(label for _, label in columns)
        + " | reason |",
        "|---" * (5 + len(columns)) + "|",
    ]
    for backend in document["backends"]:
        counts = backend["counts"]
        lines.append(
            f"| {backend['backend']} | **{backend['status']}** | "
            f"{'yes' if backend['required'] else 'no'} | {cell(source_text(backend))} | "
            + " | ".join(str(counts.get(key, 0)) for key, _ in columns)
            + f" | {cell(with_code(backend['reason'], backend.get('code')))} |"
        )
    return lines


def is_stale(backend: dict[str, Any]) -> bool:
    """Whether a backend's results come from STALE evidence."""
    return backend["status"] == "STALE" or bool((backend.get("evidence") or {}).get("stale"))


def _headroom(document: dict[str, Any]) -> list[str]:
    stale = {b["backend"] for b in document["backends"] if is_stale(b)}
    rows = [row for backend in document["backends"] for row in backend["headroom"]]
    if not rows:
        return []
    worst = sorted(rows, key=lambda row: -row["ratio"])[:HEADROOM_ROWS]
    lines = ["", "## Tolerance headroom (least headroom first)", ""]
    lines += ["| backend | case | error ÷ tolerance | figure |", "|---|---|---|---|"]
    lines += [
        f"| {row['backend']}{' (STALE evidence)' if row['backend'] in stale else ''} | "
        f"{cell(row['case'])} | {row['ratio']:.3g} | {row['worst']} |"
        for row in worst
    ]
    return lines


def _failures(document: dict[str, Any]) -> list[str]:
    groups = failure_groups(document)
    if not groups:
        return []
    total = sum(group["count"] for group in groups)
    lines = ["", "## Failures, errors and unexplained skips", ""]
    lines.append(f"{total} in {len(groups)} group(s) of one cause each.")
    for group in groups:
        count = group["count"]
        lines += ["", f"### {group['backend']} · {group['family']}: {count} {group['outcome']}", ""]
        if count > 1:
            lines += [f"Same message shape: `{cell(group['shape'])}`", ""]
        ids = ", ".join(f"`{cell(node_id)}`" for node_id in group["ids"][:FIRST_IDS])
        more = count - min(count, FIRST_IDS)
        lines.append(("First: " if more else "") + ids + (f" and {more} more" if more else ""))
        message = plain_message(group["first"]["message"] or "(no message)", group["files"])
        lines += ["", fenced(message[:MAX_MESSAGE_CHARS]), "", where_messages_are(group)]
    return lines


def _baseline(document: dict[str, Any]) -> list[str]:
    baseline = document.get("baseline")
    if not baseline:
        return []
    lines = ["", f"## Changes since {baseline['file']} ({baseline['generated_at']})", ""]
    if not baseline["backends"]:
        return [*lines, "No test changed outcome; none was added or removed."]
    for name, changes in baseline["backends"].items():
        for key, label in BASELINE_KINDS:
            if changes[key]["count"]:
                ids = ", ".join(f"`{cell(i)}`" for i in changes[key]["ids"][:10])
                lines.append(f"- {name}: {changes[key]['count']} {label}: {ids}")
    return lines


def render_markdown(document: dict[str, Any]) -> str:
    """The Markdown report of a sign-off document (see `report_json.signoff_document`)."""
    lines = [
        f"# MLA conformance sign-off: {document['verdict']}",
        "",
        f"Generated {document['generated_at']} from `{document['reports_dir']}`. "
        f"Required backends: {', '.join(document['required']) or 'none'} "
        f"({document['required_source']}).",
        "",
    ]
    release_first = _expected(document) if document.get("release") else []
    lines += [*release_first[1:], ""] if release_first else []
    blocking = blocking_lines(document)
    lines += ["## What stops a PASS", ""] + [f"- {cell(line)}" for line in blocking]
    if not blocking:
        lines.append("Nothing stops a PASS of the required backends.")
    lines += ["", *_table(document), "", "## Not signed off here", ""]
    rows = document["not_signed_off"]
    lines += [
        f"- {row['backend']} {row['status']} ({'required' if row['required'] else 'optional'})"
        f": {cell(with_code(row['reason'], row.get('code')))}"
        for row in rows
    ] or ["Every backend is signed off."]
    families = document["families"]
    if families:
        lines += ["", "## Backend × family", ""]
        lines.append("| backend | " + " | ".join(families) + " |")
        lines.append("|---" * (len(families) + 1) + "|")
        for backend in document["backends"]:
            stale = " (STALE)" if is_stale(backend) else ""
            row = [family_cell(backend["families"].get(family, {})) for family in families]
            row = [text + stale if text != "–" else text for text in row]
            lines.append(f"| {backend['backend']}{stale} | " + " | ".join(row) + " |")
    lines += _baseline(document)
    problems = all_problems(document)
    if problems:
        lines += ["", "## Problems", ""] + [f"- {cell(problem)}" for problem in problems]
    lines += _failures(document)
    lines += [] if document.get("release") else _expected(document)
    lines += _headroom(document)
    lines += ["", "## Evidence and provenance", ""]
    lines += [f"- {cell(line)}" for line in provenance_text(document)]
    warnings = all_warnings(document)
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {cell(warning)}" for warning in warnings]
    lines += ["", f"**Verdict: {document['verdict']}** (exit code {document['exit_code']})", ""]
    return "\n".join(lines)
