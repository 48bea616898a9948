"""Deterministic test sharding: which tests belong to which shard (the names are in `names`).

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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from conformance.runs.names import Shard

DURATIONS_FILE = ".test_durations"


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
