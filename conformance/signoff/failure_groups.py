"""Failures grouped by cause: same backend, family, outcome and message shape.

Thirty-nine golden cases failing on one dropped scale are one finding, not thirty-nine; and
tests of one backend and outcome whose messages read the same (numbers aside) are one group
whatever their family or case ids: 44 identical skips are one finding, never split by the
case-id pieces their common message happens to contain. A
message's shape is its first line with the case's own parameter id (and each piece of it
that holds a digit: ``q-bf16-kv-e4m3fn`` gives ``bf16`` and ``e4m3fn``) replaced by
``‹case›`` and every number (and hex address) by ``#``: ``‹case› decode (own metadata) out:
MISMATCH (# elements; atol=#, rtol=#, cos_diff=#)``. The reports show each group once, with
its count, its first ids and the first message in full, and name the JUnit file that holds
every message.
"""

from __future__ import annotations

import re
from typing import Any

FIRST_IDS = 3
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PYTEST_NOTE = re.compile(r"\n\[(\+\d+ more lines?|truncated); full report in element text\]\s*$")
_NAMES_A_CASE = re.compile(r"^(?=.*\d)[\w.]{3,}$")  # a piece of a case id: bf16, e4m3fn, cu80
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def parameter_of(node_id: str) -> str | None:
    """The parametrization of a node id (``...::test_x[PARAM]`` → ``PARAM``), else None."""
    name = node_id.rsplit("::", 1)[-1]
    if name.endswith("]") and "[" in name:
        return name[name.index("[") + 1 : -1]
    return None


def message_shape(message: str, node_id: str) -> str:
    """The first line of ``message`` with the case id, numbers and addresses normalised."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    first = lines[0] if lines else "(no message)"
    parameter = parameter_of(node_id)
    if parameter:
        first = first.replace(parameter, "‹case›")
        for piece in {piece for piece in parameter.split("-") if _NAMES_A_CASE.search(piece)}:
            first = re.sub(rf"(?<![\w-]){re.escape(piece)}(?![\w-])", "‹case›", first)
    return _NUMBER.sub("#", _HEX.sub("#", first))


def plain_shape(message: str) -> str:
    """The first line of ``message`` with numbers and addresses normalised, case ids kept."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return _NUMBER.sub("#", _HEX.sub("#", lines[0] if lines else "(no message)"))


def _junit_files(backend: dict[str, Any], sources: list[str]) -> list[str]:
    """The paths of the JUnit files named ``sources`` (from the run provenance rows)."""
    by_name = {row["file"].rsplit("/", 1)[-1]: row["file"] for row in backend["provenance"]}
    return [by_name.get(source, source) for source in sources]


def failure_groups(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every backend's problems (failures, errors, unexplained skips) grouped by cause.

    Each group: ``backend``, ``family`` (the families of its cases, comma-separated),
    ``outcome``, ``shape``, ``count``, ``ids`` (all),
    ``first`` (the first case, its message in full) and ``files`` (the JUnit files, as paths).
    Groups keep the order of their first case.
    """
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    for backend in document["backends"]:
        for case in backend["problems"]:
            message = case["message"] or ""
            same_text = (backend["backend"], case["outcome"], "text", plain_shape(message))
            shape = message_shape(message, case["id"])
            key = (backend["backend"], case["family"], case["outcome"], shape)
            group = groups.get(same_text) or groups.get(key)
            if group is None:
                group = {
                    "backend": backend["backend"],
                    "family": case["family"],
                    "outcome": case["outcome"],
                    "shape": shape,
                    "plain": plain_shape(message),
                    "families": [],
                    "ids": [],
                    "first": case,
                    "sources": [],
                    "_backend": backend,
                }
            groups.setdefault(same_text, group)
            groups.setdefault(key, group)
            group["ids"].append(case["id"])
            if case["family"] not in group["families"]:
                group["families"].append(case["family"])
            if plain_shape(message) != group["plain"]:
                group["plain"] = None  # the texts differ: only the shape is common
            if case["source"] not in group["sources"]:
                group["sources"].append(case["source"])
    result = []
    for group in {id(group): group for group in groups.values()}.values():
        backend = group.pop("_backend")
        group["family"] = ", ".join(group.pop("families"))
        plain = group.pop("plain")
        group["shape"] = plain if plain is not None else group["shape"]
        group["count"] = len(group["ids"])
        group["files"] = _junit_files(backend, sorted(group.pop("sources")))
        result.append(group)
    return result


def where_messages_are(group: dict[str, Any]) -> str:
    """``The full message of each is in reports/junit/cpu.xml.`` (or of the one test)."""
    files = " and ".join(group["files"]) or "the run's JUnit file"
    subject = "The full message of each" if group["count"] > 1 else "The full message"
    return f"{subject} is in {files}."


def plain_message(message: str, files: list[str]) -> str:
    """``message`` with pytest's note on a shortened message said plainly.

    pytest keeps about 500 characters of a failure in the JUnit ``message`` attribute and ends
    it with ``[+14 more lines; full report in element text]``; this names the file instead.
    """
    where = " and ".join(files) or "the run's JUnit file"

    def note(match: re.Match[str]) -> str:
        cut = "the message is cut" if match.group(1) == "truncated" else match.group(1)
        return f"\n[{cut}: the full message is in {where}]"

    return _PYTEST_NOTE.sub(note, message)
