"""Family A's domain: the `CommonAttentionMetadata` record and everything that builds it.

- `record`: the dataclass and its field lists (required, builder-required, deprecated);
- `validator`: `validate(cam)`, every invariant of the record (`paging`: its paging rules);
- `corpus`: malformed records, one corruption each, and valid edge cases;
- `transforms`: unpad, micro-batch slice, decode/prefill views (construction sites);
- `batch`: `BatchSpec` and the factory `make_cam`;
- `dims`: MLA dimensions and model presets.
"""

from __future__ import annotations

from conformance.metadata.record import (
    BUILDER_REQUIRED_FIELDS,
    DEPRECATED_FIELDS,
    REQUIRED_FIELDS,
    CommonAttentionMetadata,
    cam_field_names,
    optional_field_names,
)
from conformance.metadata.validator import PAD_SLOT_ID, validate

__all__ = [
    "BUILDER_REQUIRED_FIELDS",
    "DEPRECATED_FIELDS",
    "PAD_SLOT_ID",
    "REQUIRED_FIELDS",
    "CommonAttentionMetadata",
    "cam_field_names",
    "optional_field_names",
    "validate",
]
