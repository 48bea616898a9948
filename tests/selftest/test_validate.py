"""Negative controls of `validate`: each broken record is rejected, naming its field."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from conformance.errors import MetadataError
from conformance.metadata import batch
from conformance.metadata.record import CommonAttentionMetadata
from conformance.metadata.validator import validate


def _cam(spec: str = "mixed_small") -> CommonAttentionMetadata:
    return batch.make_cam(batch.BATCH_SPECS[spec], block_size=16)


def _set(tensor: torch.Tensor, index: int, value: int) -> torch.Tensor:
    out = tensor.clone()
    out[index] = value
    return out


CORRUPTIONS: dict[str, tuple[str, Callable[[CommonAttentionMetadata], CommonAttentionMetadata]]] = {
    "qsl-not-monotone": (
        "query_start_loc_cpu",
        lambda c: c.replace(
            query_start_loc=_set(c.query_start_loc, 2, 0),
            query_start_loc_cpu=_set(c.query_start_loc_cpu, 2, 0),
        ),
    ),
    "qsl-cpu-copy-differs": (
        "query_start_loc",
        lambda c: c.replace(query_start_loc=_set(c.query_start_loc, 1, 0)),
    ),
    "qsl-not-zero-based": (
        "query_start_loc_cpu",
        lambda c: c.replace(
            query_start_loc=c.query_start_loc + 1, query_start_loc_cpu=c.query_start_loc_cpu + 1
        ),
    ),
    "num-actual-tokens": ("num_actual_tokens", lambda c: c.replace(num_actual_tokens=5)),
    "max-query-len": ("max_query_len", lambda c: c.replace(max_query_len=1)),
    "seq-below-query": ("seq_lens", lambda c: c.replace(seq_lens=_set(c.seq_lens, 2, 2))),
    "max-seq-len": ("max_seq_len", lambda c: c.replace(max_seq_len=10)),
    "seq-lens-dtype": ("seq_lens", lambda c: c.replace(seq_lens=c.seq_lens.to(torch.int64))),
    "upper-bound-missing": (
        "seq_lens_cpu_upper_bound",
        lambda c: c.replace(seq_lens_cpu_upper_bound=None),
    ),
    "upper-bound-inexact-on-prefill": (
        "seq_lens_cpu_upper_bound",
        lambda c: c.replace(seq_lens_cpu_upper_bound=_set(c.seq_lens_cpu_upper_bound, 3, 100)),
    ),
    "block-table-dtype": (
        "block_table_tensor",
        lambda c: c.replace(block_table_tensor=c.block_table_tensor.to(torch.int64)),
    ),
    "slot-disagrees-with-table": (
        "slot_mapping",
        lambda c: c.replace(slot_mapping=_set(c.slot_mapping, 4, int(c.slot_mapping[4]) + 1)),
    ),
    "slot-mapping-dtype": (
        "slot_mapping",
        lambda c: c.replace(slot_mapping=c.slot_mapping.to(torch.int32)),
    ),
    "positions-wrong": ("positions", lambda c: c.replace(positions=_set(c.positions, 0, 7))),
    "causal-not-bool": ("causal", lambda c: c.replace(causal=1)),
    "dcp-longer-than-seq": (
        "dcp_local_seq_lens",
        lambda c: c.replace(dcp_local_seq_lens=c.seq_lens + 1),
    ),
    "required-none": ("slot_mapping", lambda c: c.replace(slot_mapping=None)),
    "num-reqs-negative": ("num_reqs", lambda c: c.replace(num_reqs=-1)),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_validate_rejects(case):
    field, corrupt = CORRUPTIONS[case]
    with pytest.raises(MetadataError) as exc:
        validate(corrupt(_cam()), block_size=16)
    assert exc.value.field.split("[")[0].split(" ")[0] == field, str(exc.value)
    assert field in str(exc.value)


def test_block_ids_beyond_the_pool_are_rejected():
    cam = _cam()
    with pytest.raises(MetadataError, match="block_table_tensor"):
        validate(cam, block_size=16, num_blocks=2)


def test_error_message_prints_expected_and_found():
    cam = _cam().replace(max_seq_len=10)
    with pytest.raises(MetadataError) as exc:
        validate(cam)
    assert str(exc.value) == "max_seq_len: expected >= longest sequence (56), found 10"


@pytest.mark.parametrize("name", sorted(batch.BATCH_SPECS))
def test_factory_output_is_valid(name):
    spec = batch.BATCH_SPECS[name]
    threshold = max(spec.query_lens) if max(spec.query_lens) <= 4 else 1
    for block_size in (1, 16, 64):
        validate(
            batch.make_cam(spec, block_size=block_size),
            decode_threshold=threshold,
            block_size=block_size,
        )


def test_batch_spec_rejects_inconsistent_lengths():
    with pytest.raises(ValueError, match="seq_len 3 < query_len 4"):
        batch.BatchSpec((3,), (4,), "bad")
    with pytest.raises(ValueError, match="seq_lens has 2 entries"):
        batch.BatchSpec((3, 4), (1,), "bad")
