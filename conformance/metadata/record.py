"""`CommonAttentionMetadata`: the per-batch record every MLA metadata builder consumes.

Modelled on vLLM's record (``vllm/v1/attention/backend.py`` in vllm-project/vllm, formerly
``vllm/v1/attention/backends/utils.py``). The field set is
pinned by `tests/conformance/test_metadata.py`; adding a field fails there with the list
of construction sites to review.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from conformance.metadata.transforms import unpad

# Fields a builder cannot work without; leaving one out or passing None is a MetadataError.
REQUIRED_FIELDS: tuple[str, ...] = (
    "query_start_loc",
    "query_start_loc_cpu",
    "seq_lens",
    "num_reqs",
    "num_actual_tokens",
    "max_query_len",
    "max_seq_len",
    "block_table_tensor",
    "slot_mapping",
)

# Optional in the type, but the MLA builder needs it whenever a prefill row is present
# (vLLM #40654); construction sites must pass it (the audit reports those that do not).
BUILDER_REQUIRED_FIELDS: tuple[str, ...] = (*REQUIRED_FIELDS, "seq_lens_cpu_upper_bound")

# Deprecated keyword arguments: still accepted, but the audit flags every site passing them.
DEPRECATED_FIELDS: dict[str, str] = {
    "_seq_lens_cpu": "use seq_lens_cpu_upper_bound (exact on prefill rows) instead",
}


@dataclass
class CommonAttentionMetadata:
    """Per-batch attention metadata shared by every layer and backend."""

    query_start_loc: torch.Tensor
    """int32 [num_reqs + 1] on the device: prefix sum of query lengths, starts at 0."""
    query_start_loc_cpu: torch.Tensor
    """int32 [num_reqs + 1] on the CPU: equal to `query_start_loc`."""
    seq_lens: torch.Tensor
    """int32 [num_reqs] on the device: context plus the tokens scheduled now."""
    num_reqs: int
    """Number of requests, padding requests (query length 0) included."""
    num_actual_tokens: int
    """Total query tokens; equals `query_start_loc[num_reqs]`."""
    max_query_len: int
    """Longest query in the batch, exactly (the transforms recompute it; `validate` checks it)."""
    max_seq_len: int
    """Upper bound on `seq_lens` (may over-estimate, never under)."""
    block_table_tensor: torch.Tensor
    """int32 [num_reqs, max_blocks]: physical block ids per request, in logical order."""
    slot_mapping: torch.Tensor
    """int64 [num_actual_tokens]: flat KV slot of each new token; -1 for padding."""
    causal: bool = True
    """Causal mask across the query tokens of a request."""
    seq_lens_cpu_upper_bound: torch.Tensor | None = None
    """int32 [num_reqs] on the CPU: >= seq_lens, exact on prefill rows."""
    dcp_local_seq_lens: torch.Tensor | None = None
    """int32 [num_reqs]: per-rank kv lengths under decode context parallelism."""
    dcp_local_seq_lens_cpu: torch.Tensor | None = None
    """CPU copy of `dcp_local_seq_lens`."""
    positions: torch.Tensor | None = None
    """int64 [num_actual_tokens]: position of each new token."""
    is_prefilling: torch.Tensor | None = None
    """bool [num_reqs]: request is still in its prompt phase."""
    _seq_lens_cpu: torch.Tensor | None = None
    """Deprecated backing store of the `seq_lens_cpu` property."""

    @property
    def seq_lens_cpu(self) -> torch.Tensor:
        """Deprecated: exact CPU sequence lengths (may force a device-to-host copy)."""
        warnings.warn(
            "CommonAttentionMetadata.seq_lens_cpu is deprecated; "
            "use seq_lens_cpu_upper_bound (exact on prefill rows)",
            DeprecationWarning,
            stacklevel=2,
        )
        if self._seq_lens_cpu is not None:
            return self._seq_lens_cpu
        return self.seq_lens.to("cpu")

    def batch_size(self) -> int:
        """Number of requests."""
        return int(self.seq_lens.shape[0])

    def query_lens_cpu(self) -> torch.Tensor:
        """Per-request query lengths from the CPU copy."""
        return self.query_start_loc_cpu[1:] - self.query_start_loc_cpu[:-1]

    def replace(self, **changes: Any) -> CommonAttentionMetadata:
        """A copy with `changes` applied (`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)

    def unpadded(self, num_actual_tokens: int, num_actual_reqs: int) -> CommonAttentionMetadata:
        """A copy sliced to the first `num_actual_reqs` requests and their tokens."""
        return unpad(self, num_actual_tokens=num_actual_tokens, num_actual_reqs=num_actual_reqs)


def cam_field_names() -> tuple[str, ...]:
    """Names of every field of `CommonAttentionMetadata`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(CommonAttentionMetadata))


def optional_field_names() -> tuple[str, ...]:
    """Fields with a default (the ones a careless construction site can silently drop)."""
    return tuple(
        f.name
        for f in dataclasses.fields(CommonAttentionMetadata)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    )
