"""Deterministic test sharding and the JUnit file names that go with it.

A shard is written ``I/N`` with a 1-based index ``I``. A test belongs to shard
``sha256(node id) mod N + 1``: the same on every machine, every Python and every xdist worker,
independent of collection order (the pytest-shard rule, made 1-based). That hash rule is the
fallback: where the committed durations file (``.test_durations``, written by pytest-split's
``--store-durations``) and the ``pytest-split`` package are present, `select_for_shard` balances
the shards by recorded runtime instead (pytest-split's least-duration algorithm, which sorts
by node id first and so is also independent of collection order).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

DURATIONS_FILE = ".test_durations"
PARTIAL_DIR = "partial"

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


def shard_index_of(node_id: str, count: int) -> int:
    """The 1-based shard index that ``node_id`` belongs to when split ``count`` ways."""
    digest = hashlib.sha256(node_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


class _Node(NamedTuple):
    """What pytest-split's algorithms read of a test item: its node id."""

    nodeid: str


def load_durations(path: Path) -> dict[str, float] | None:
    """The ``{node id: seconds}`` of a pytest-split durations file; None when it is absent.

    Raises `ValueError` naming the file when it is not such a JSON object.
    """
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable durations file: {error}") from None
    if not isinstance(data, dict) or not all(
        isinstance(key, str) and isinstance(value, int | float) for key, value in data.items()
    ):
        raise ValueError(f"{path}: expected a JSON object of node id -> seconds")
    return {key: float(value) for key, value in data.items()}


def duration_algorithm() -> object | None:
    """pytest-split's least-duration algorithm, or None where pytest-split is not installed."""
    try:
        from pytest_split.algorithms import Algorithms
    except ImportError:
        return None
    return Algorithms.least_duration.value


def select_for_shard(
    ids: Iterable[str], shard: Shard, durations: Mapping[str, float] | None = None
) -> list[str]:
    """The ids of ``ids`` that belong to ``shard``, in their original order.

    With ``durations`` (and pytest-split installed) the shards are balanced by runtime;
    otherwise each id goes to the shard its hash names.
    """
    ids = list(ids)
    algorithm = duration_algorithm() if durations is not None else None
    if algorithm is None:
        return [node_id for node_id in ids if shard_index_of(node_id, shard.count) == shard.index]
    groups = algorithm(shard.count, [_Node(node_id) for node_id in ids], dict(durations or {}))
    chosen = {node.nodeid for node in groups[shard.index - 1].selected}
    return [node_id for node_id in ids if node_id in chosen]


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
    return junit_path.with_name(junit_path.name.removesuffix(".xml") + ".meta.json")


def partial_junit_path(path: Path) -> Path:
    """Where a partial run's conventional JUnit file goes: ``…/junit/partial/cpu.xml``."""
    return path.parent / PARTIAL_DIR / path.name
