"""Special filesystems the tree walk never enters (``/proc``, ``/sys``, ``/dev``, ...).

Their files are not source: they are generated on each read, can be endless (``/proc``
holds a link to every process's root) or block. On Linux the mount table
(``/proc/self/mountinfo``) gives each mount point its filesystem type; elsewhere nothing is
known to be special and the walk's other bounds apply.
"""

from __future__ import annotations

import os

SPECIAL_TYPES: frozenset[str] = frozenset(
    {
        "proc",
        "sysfs",
        "devtmpfs",
        "devpts",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "mqueue",
        "hugetlbfs",
        "autofs",
        "binfmt_misc",
        "efivarfs",
        "rpc_pipefs",
        "nsfs",
    }
)
"""Pseudo-filesystems: no source lives there."""

_MOUNTINFO = "/proc/self/mountinfo"


def _unescape(text: str) -> str:
    """Mount points escape space, tab, newline and backslash as octal (``\\040``)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def mount_table(path: str = _MOUNTINFO) -> list[tuple[str, str]]:
    """(mount point, filesystem type), longest mount point first; empty when unknown."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read(1 << 20).splitlines()
    except OSError:
        return []
    table = []
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and tail:
            table.append((_unescape(fields[4]), tail[0]))
    return sorted(table, key=lambda item: len(item[0]), reverse=True)


class Mounts:
    """Which filesystem a real path lives on (the mount table read once)."""

    def __init__(self, table: list[tuple[str, str]] | None = None) -> None:
        self.table = mount_table() if table is None else table

    def fs_type(self, real: str) -> str | None:
        """The type of the filesystem holding the resolved path `real`, if known."""
        for point, kind in self.table:
            if real == point or real.startswith(point.rstrip(os.sep) + os.sep):
                return kind
        return None

    def special(self, real: str) -> str | None:
        """The pseudo-filesystem type `real` is on, else None."""
        kind = self.fs_type(real)
        return kind if kind in SPECIAL_TYPES else None
