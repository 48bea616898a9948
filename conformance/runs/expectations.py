"""Per-backend expectation files: which conformance tests are expected to fail or be skipped.

File: ``conformance/expectations/<backend>.txt``. One entry per line::

    [xfail: | skip: ]<node id or prefix>  # <reason>

- ``xfail:`` (also the default when no prefix is given) marks the tests ``xfail(strict=True)``:
  they run, a failure is reported as xfail, and a pass fails the run (``XPASS(strict)``), so an
  entry that is no longer needed cannot linger.
- ``skip:`` marks the tests ``skip``: they do not run (for a test that crashes or hangs).
- An entry matches a node id equal to it, or a node id that continues it at a boundary: ``::``,
  ``[`` or ``/`` (so ``tests/conformance/test_stubs.py`` matches every test of that module, and
  ``...::test_x`` every parameter of ``test_x``, but ``...::test_x`` never ``...::test_xy``).
  When several entries match, the longest (most specific) wins.
- The reason after ``#`` is required; an entry without one is an error naming file and line.
- Blank lines and lines that start with ``#`` are ignored. An entry that matches no collected
  test is stale: the plugin warns, and the sign-off lists it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from conformance.errors import ConformanceError

ExpectationKind = Literal["xfail", "skip"]

DEFAULT_EXPECTATIONS_DIR = Path(__file__).resolve().parents[1] / "expectations"
EXPECTATION_KINDS: tuple[ExpectationKind, ...] = ("xfail", "skip")
EXPECTED_SKIP_PREFIX = "expected skip"
EXPECTED_XFAIL_PREFIX = "expected failure"

_KIND_PREFIX = re.compile(r"^(?P<kind>[A-Za-z_]+):(?!:)\s*(?P<rest>.*)$")
_REASON_SPLIT = re.compile(r"(?:^|\s)#")


class ExpectationFileError(ConformanceError, ValueError):
    """An expectation file has a malformed line; the message names file and line."""


@dataclass(frozen=True)
class Expectation:
    """One entry of an expectation file."""

    pattern: str
    kind: ExpectationKind
    reason: str
    file: Path
    line: int

    @property
    def location(self) -> str:
        """``cpu.txt:12``: where the entry is written (file name and line)."""
        return f"{self.file.name}:{self.line}"

    def matches(self, node_id: str) -> bool:
        """Whether this entry applies to ``node_id`` (exact, or a prefix at a boundary)."""
        return id_matches(self.pattern, node_id)

    def mark_reason(self) -> str:
        """The reason given to the pytest mark; the sign-off recognises its prefix."""
        prefix = EXPECTED_SKIP_PREFIX if self.kind == "skip" else EXPECTED_XFAIL_PREFIX
        return f"{prefix} ({self.location}): {self.reason}"


def id_matches(pattern: str, node_id: str) -> bool:
    """Whether ``pattern`` names ``node_id`` exactly or is a prefix ending at a boundary."""
    if node_id == pattern:
        return True
    if not node_id.startswith(pattern):
        return False
    if pattern.endswith(("/", "::")):
        return True
    return node_id[len(pattern) :].startswith(("::", "[", "/"))


def parse_expectations(text: str, *, file: Path) -> list[Expectation]:
    """Parse the text of an expectation file; raise `ExpectationFileError` on a bad line."""
    entries: list[Expectation] = []
    seen: dict[str, int] = {}
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{file}:{line_number}"
        kind: ExpectationKind = "xfail"
        prefixed = _KIND_PREFIX.match(line)
        if prefixed is not None:
            word = prefixed.group("kind")
            if word not in EXPECTATION_KINDS:
                raise ExpectationFileError(
                    f"{where}: unknown prefix {word + ':'!r}; use 'xfail:' or 'skip:'"
                )
            kind = word  # type: ignore[assignment]
            line = prefixed.group("rest")
        parts = _REASON_SPLIT.split(line, maxsplit=1)
        pattern = parts[0].strip()
        reason = parts[1].strip() if len(parts) == 2 else ""
        if not pattern:
            raise ExpectationFileError(f"{where}: entry has no node id before '#'")
        if not reason:
            raise ExpectationFileError(
                f"{where}: entry {pattern!r} has no reason; write '{pattern}  # <reason>'"
            )
        if pattern in seen:
            raise ExpectationFileError(
                f"{where}: entry {pattern!r} repeats line {seen[pattern]} of the same file"
            )
        seen[pattern] = line_number
        entries.append(Expectation(pattern, kind, reason, file, line_number))
    return entries


def load_expectations(path: Path) -> list[Expectation]:
    """Read and parse one expectation file; a file that does not exist has no entries."""
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ExpectationFileError(f"{path}: cannot read expectation file: {error}") from error
    return parse_expectations(text, file=path)


def expectations_sha256(path: Path) -> str | None:
    """The sha256 of an expectation file's bytes (a run records it); None when there is none."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def expectations_path(backend: str, directory: Path | None = None) -> Path:
    """Where the expectation file of ``backend`` lives (``<dir>/<backend>.txt``)."""
    return (directory or DEFAULT_EXPECTATIONS_DIR) / f"{backend}.txt"


def match_expectation(entries: Sequence[Expectation], node_id: str) -> Expectation | None:
    """The most specific entry that applies to ``node_id``, or None."""
    best: Expectation | None = None
    for entry in entries:
        if entry.matches(node_id) and (best is None or len(entry.pattern) > len(best.pattern)):
            best = entry
    return best


def stale_entries(entries: Sequence[Expectation], node_ids: Iterable[str]) -> list[Expectation]:
    """The entries that match none of ``node_ids``."""
    ids = list(node_ids)
    return [entry for entry in entries if not any(entry.matches(node_id) for node_id in ids)]
