"""`Checked`: a `CommonAttentionMetadata` under `validate`, with what its rules read.

The rules of `conformance.metadata.validator.RULES` run in order on one `Checked`; what
several of them read (the record's device, the query offsets and lengths, the sequence
lengths) is derived here once. A rule may rely on the rules before it (types before
dtypes, shapes before values).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import torch

from conformance.errors import MetadataError
from conformance.metadata.record import CommonAttentionMetadata

# Device-side required tensors; without a `device` argument their majority is the record's.
_DEVICE_ANCHORS = ("query_start_loc", "seq_lens", "block_table_tensor", "slot_mapping")


@dataclass
class Checked:
    """One record and the facts `validate` was given about it."""

    cam: CommonAttentionMetadata
    decode_threshold: int = 1
    block_size: int | None = None
    num_blocks: int | None = None
    requested_device: torch.device | str | None = None

    @cached_property
    def device(self) -> torch.device:
        """Where the device-side tensors must live (default: where most required ones are)."""
        if self.requested_device is not None:
            return torch.device(self.requested_device)
        votes = Counter(getattr(self.cam, name).device for name in _DEVICE_ANCHORS)
        return votes.most_common(1)[0][0]

    @cached_property
    def offsets(self) -> torch.Tensor:
        """``query_start_loc_cpu`` as int64."""
        return self.cam.query_start_loc_cpu.to(torch.int64)

    @cached_property
    def query_lens(self) -> torch.Tensor:
        """Each request's query length; a negative one (decreasing offsets) counts as 0
        here, for the rules after the one that names it (V10) never to trip over it."""
        return (self.offsets[1:] - self.offsets[:-1]).clamp(min=0)

    @cached_property
    def seq(self) -> torch.Tensor:
        """``seq_lens`` as int64 on the CPU."""
        return self.cam.seq_lens.cpu().to(torch.int64)

    @cached_property
    def is_prefill(self) -> torch.Tensor:
        """Rows whose query is longer than the decode threshold."""
        return self.query_lens > self.decode_threshold

    def ranges(self) -> list[tuple[int, int]]:
        """Each request's ``[start, end)`` of new tokens (``end >= start``)."""
        starts = self.offsets[:-1].tolist()
        return [(s, s + int(q)) for s, q in zip(starts, self.query_lens.tolist(), strict=True)]


def same_device(found: torch.device, expected: torch.device) -> bool:
    """A device without an index (``cuda``) matches any index."""
    if expected.index is None:
        return found.type == expected.type
    return found == expected


def check_rows(ok: torch.Tensor, name: str, expected: str, *values: torch.Tensor) -> None:
    """Raise `MetadataError` naming ``name[row]`` of the first row where `ok` is false."""
    bad = (~ok).nonzero().flatten()
    if bad.numel():
        row = int(bad[0])
        found = ", ".join(str(int(v[row])) for v in values)
        raise MetadataError(f"{name}[{row}]", expected, found)
