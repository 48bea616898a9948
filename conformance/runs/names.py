"""The names of a run's files: the JUnit report, its shard, its sidecar and where a partial
run's report goes.

``reports/junit/<backend>.xml`` or ``reports/junit/<backend>-shard-<i>-of-<n>.xml`` (1-based
``i``), each with its sidecar ``<same name minus .xml>.meta.json``; a partial selection writes
to ``reports/junit/partial/`` instead. The pytest plugin writes these files, the sign-off and the
noxfile read them: both take every name from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

JUNIT_DIR = Path("reports") / "junit"
PARTIAL_DIR = "partial"
JUNIT_SUFFIX = ".xml"
SIDECAR_SUFFIX = ".meta.json"

_SHARD_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_JUNIT_NAME = re.compile(
    r"^(?P<backend>[A-Za-z0-9_.]+?)(?:-shard-(?P<index>\d+)-of-(?P<count>\d+))?\.xml$"
)
_BACKEND_NAME = re.compile(r"^[A-Za-z0-9_.]+$")


@dataclass(frozen=True, order=True)
class Shard:
    """One shard of a run: ``index`` of ``count``, 1-based (``Shard(2, 4)`` is ``2/4``)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"shard count must be at least 1, got {self.count}")
        if not 1 <= self.index <= self.count:
            raise ValueError(
                f"shard index must be between 1 and {self.count}, got {self.index} "
                f"(shards are written I/N with a 1-based I)"
            )

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """Parse ``"I/N"`` (1-based ``I``) into a `Shard`; raise `ValueError` naming the input."""
    match = _SHARD_SPEC.match(text)
    if match is None:
        raise ValueError(f"shard {text!r} is not of the form I/N (for example 2/4)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise ValueError(f"shard {text!r}: the count N must be at least 1")
    if not 1 <= index <= count:
        raise ValueError(f"shard {text!r}: the index I must be between 1 and {count} (1-based)")
    return Shard(index, count)


def junit_name(backend: str, shard: Shard | None) -> str:
    """The JUnit file name of one run: ``cpu.xml`` or ``cuda-shard-2-of-4.xml``."""
    if not _BACKEND_NAME.match(backend):
        raise ValueError(f"backend name {backend!r} may use only letters, digits, '_' and '.'")
    if shard is None:
        return f"{backend}.xml"
    return f"{backend}-shard-{shard.index}-of-{shard.count}.xml"


def parse_junit_name(file_name: str) -> tuple[str, Shard | None]:
    """Invert `junit_name`: ``"cuda-shard-2-of-4.xml"`` → ``("cuda", Shard(2, 4))``.

    Raises `ValueError` naming the file when the name follows neither form.
    """
    match = _JUNIT_NAME.match(file_name)
    if match is None:
        raise ValueError(
            f"{file_name}: not a conformance JUnit name (<backend>.xml or "
            f"<backend>-shard-<i>-of-<n>.xml)"
        )
    if match.group("index") is None:
        return match.group("backend"), None
    try:
        shard = Shard(int(match.group("index")), int(match.group("count")))
    except ValueError as error:
        raise ValueError(f"{file_name}: {error}") from None
    return match.group("backend"), shard


def sidecar_path(junit_path: Path) -> Path:
    """The metadata sidecar next to a JUnit file: ``cpu.xml`` → ``cpu.meta.json``."""
    return junit_path.with_name(sidecar_name(junit_path.name))


def partial_junit_path(path: Path) -> Path:
    """Where a partial run's conventional JUnit file goes: ``…/junit/partial/cpu.xml``."""
    return path.parent / PARTIAL_DIR / path.name


def sidecar_name(junit_file_name: str) -> str:
    """``cpu.xml`` → ``cpu.meta.json``."""
    return junit_file_name.removesuffix(JUNIT_SUFFIX) + SIDECAR_SUFFIX


def junit_name_of_sidecar(sidecar_file_name: str) -> str:
    """``cpu.meta.json`` → ``cpu.xml``: the JUnit file a sidecar describes."""
    return sidecar_file_name.removesuffix(SIDECAR_SUFFIX) + JUNIT_SUFFIX
