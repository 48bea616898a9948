"""The batch factory: its output validates, its `BatchSpec` refuses inconsistent lengths."""

from __future__ import annotations

import pytest

from conformance.metadata import batch
from conformance.metadata.validator import validate


@pytest.mark.parametrize("name", sorted(batch.BATCH_SPECS))
def test_factory_output_is_valid(name):
    spec = batch.BATCH_SPECS[name]
    threshold = max(spec.query_lens) if max(spec.query_lens) <= 4 else 1
    for block_size in (1, 16, 64):
        cam = batch.make_cam(spec, block_size=block_size, num_blocks=None)
        blocks = int(cam.block_table_tensor.max()) + 1
        validate(cam, decode_threshold=threshold, block_size=block_size, num_blocks=blocks)


def test_factory_refuses_a_pool_too_small():
    with pytest.raises(ValueError, match="num_blocks: expected >= 4"):
        batch.make_cam(batch.BatchSpec((40,), (1,)), block_size=16, num_blocks=3)


def test_batch_spec_rejects_inconsistent_lengths():
    with pytest.raises(ValueError, match="seq_len 3 < query_len 4"):
        batch.BatchSpec((3,), (4,), "bad")
    with pytest.raises(ValueError, match="seq_lens has 2 entries"):
        batch.BatchSpec((3, 4), (1,), "bad")
