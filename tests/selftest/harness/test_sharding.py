"""Sharding: the I/N parser, sha256-stable selection, JUnit names, and GPU pinning per worker."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conformance.harness import gpu_pinning
from conformance.harness.sharding import (
    Shard,
    junit_name,
    parse_junit_name,
    parse_shard,
    select_for_shard,
    shard_index_of,
    sidecar_path,
)

from synthetic_reports import node_ids

IDS = node_ids("metadata", 40) + node_ids("stubs", 25) + node_ids("persistent", 35)


@pytest.mark.parametrize(
    ("text", "expected"), [("1/1", Shard(1, 1)), ("2/4", Shard(2, 4)), (" 4 / 4 ", Shard(4, 4))]
)
def test_parse_shard_accepts_i_of_n(text: str, expected: Shard) -> None:
    assert parse_shard(text) == expected
    assert str(expected) == f"{expected.index}/{expected.count}"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("0/4", "between 1 and 4"),
        ("5/4", "between 1 and 4"),
        ("1/0", "at least 1"),
        ("2-4", "not of the form I/N"),
        ("a/b", "not of the form I/N"),
        ("", "not of the form I/N"),
    ],
)
def test_parse_shard_rejects_bad_input_naming_it(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as caught:
        parse_shard(text)
    assert repr(text) in str(caught.value)


def test_shard_rejects_an_index_outside_the_count() -> None:
    with pytest.raises(ValueError, match="1-based"):
        Shard(0, 3)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_shards_partition_the_ids(count: int) -> None:
    shards = [select_for_shard(IDS, Shard(index, count)) for index in range(1, count + 1)]
    flat = [node_id for shard in shards for node_id in shard]
    assert sorted(flat) == sorted(IDS), "every id in exactly one shard"
    assert len(flat) == len(set(flat))


def test_selection_is_independent_of_collection_order() -> None:
    shuffled = list(IDS)
    random.Random(7).shuffle(shuffled)
    shard = Shard(2, 4)
    assert set(select_for_shard(shuffled, shard)) == set(select_for_shard(IDS, shard))
    selected = select_for_shard(shuffled, shard)
    assert selected == [node_id for node_id in shuffled if node_id in set(selected)]


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize(
    "timed",
    [slice(None, None, 2), slice(0, 10), slice(0, 0), slice(None)],
    ids=["every-other-id", "ten-ids", "no-id", "every-id"],
)
def test_durations_lacking_some_ids_still_place_every_id_once(count: int, timed: slice) -> None:
    """Ids the durations file does not know (new tests) are placed too, once each; ids it
    knows that were not collected (removed tests) are placed nowhere."""
    pytest.importorskip("pytest_split")
    durations = {node_id: 1.0 + n % 3 for n, node_id in enumerate(IDS[timed])}
    durations["tests/conformance/test_removed.py::test_gone"] = 5.0
    shards = [select_for_shard(IDS, Shard(i, count), durations) for i in range(1, count + 1)]
    flat = [node_id for shard in shards for node_id in shard]
    assert sorted(flat) == sorted(IDS), "every collected id in exactly one shard"
    assert all(shards), [len(shard) for shard in shards]


def test_shard_assignment_is_pinned_across_machines() -> None:
    """sha256 of the id, first 8 bytes big-endian, mod N, plus 1: fixed forever."""
    ids = node_ids("metadata", 8)
    assert [shard_index_of(node_id, 4) for node_id in ids] == [3, 4, 4, 4, 4, 1, 4, 2]


def test_shards_are_roughly_balanced() -> None:
    sizes = [len(select_for_shard(IDS, Shard(index, 4))) for index in range(1, 5)]
    assert min(sizes) >= 10, sizes


@pytest.mark.parametrize(
    ("backend", "shard", "name"),
    [("cpu", None, "cpu.xml"), ("cuda", Shard(2, 4), "cuda-shard-2-of-4.xml")],
)
def test_junit_name_round_trips(backend: str, shard: Shard | None, name: str) -> None:
    assert junit_name(backend, shard) == name
    assert parse_junit_name(name) == (backend, shard)


@pytest.mark.parametrize(
    "name", ["cpu.json", "cuda-shard-5-of-4.xml", "cuda-shard-0-of-4.xml", "cu da.xml", ".xml"]
)
def test_parse_junit_name_rejects_other_names(name: str) -> None:
    with pytest.raises(ValueError, match=r"xml|shard"):
        parse_junit_name(name)


def test_junit_name_rejects_a_backend_with_separators() -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        junit_name("my-backend", None)


def test_sidecar_sits_next_to_the_junit_file() -> None:
    path = Path("reports/junit/cuda-shard-2-of-4.xml")
    assert sidecar_path(path) == Path("reports/junit/cuda-shard-2-of-4.meta.json")


@pytest.mark.parametrize(
    ("environ", "worker", "count", "expected"),
    [
        ({}, "gw0", 4, {"CUDA_VISIBLE_DEVICES": "0"}),
        ({}, "gw3", 4, {"CUDA_VISIBLE_DEVICES": "3"}),
        ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, "gw1", 4, {"CUDA_VISIBLE_DEVICES": "5"}),
        ({"MLA_GPU_COUNT": "2"}, "gw3", 4, {"CUDA_VISIBLE_DEVICES": "1"}),
    ],
)
def test_each_cuda_worker_sees_one_gpu(
    environ: dict[str, str], worker: str, count: int, expected: dict[str, str]
) -> None:
    assert (
        gpu_pinning.pinned_devices("cuda", environ, worker_id=worker, worker_count=count)
        == expected
    )


def test_rocm_workers_pin_hip_visible_devices() -> None:
    changes = gpu_pinning.pinned_devices(
        "rocm", {"HIP_VISIBLE_DEVICES": "2,3"}, worker_id="gw1", worker_count=2
    )
    assert changes == {"HIP_VISIBLE_DEVICES": "3"}


@pytest.mark.parametrize(
    ("backend", "worker", "count"),
    [("cpu", "gw1", 4), ("interpret", "gw0", 2), ("cuda", "master", 4), ("cuda", "gw0", 1)],
)
def test_nothing_is_pinned_outside_multi_worker_gpu_runs(
    backend: str, worker: str, count: int
) -> None:
    assert gpu_pinning.pinned_devices(backend, {}, worker_id=worker, worker_count=count) == {}
