"""Family A, the checks that close holes mutation testing found in the metadata family.

- the chunked-prefill workspace is ``kv_lora_rank + qk_rope_head_dim`` wide (the cache row),
  not the q·k head dim;
- the fields each transformation drops on purpose are pinned: moving a field onto a
  ``DROPPED_ON_PURPOSE`` list (which stops `test_every_optional_field_survives` checking it)
  needs this pin changed too;
- every construction site's output builds as a prefill batch too, where the builder reads
  ``seq_lens_cpu_upper_bound`` (a decode-only batch never does).
"""

from __future__ import annotations

from pathlib import Path

import torch

from backends.base import Backend
from conformance.metadata import batch, transforms
from conformance.metadata.dims import DEEPSEEK_R1

CONFORMANCE_FAMILY = "metadata"  # family A; a module of its own only to stay short

REPO = Path(__file__).resolve().parents[2]
PINNED_DROPPED: dict[str, tuple[str, ...]] = {
    "unpad": (),
    "slice_ubatch": (),
    "decode_view": (),
    "prefill_view": (),
}
"""`conformance.metadata.transforms.DROPPED_ON_PURPOSE`, field names only (review the
transformation and its consumers before changing an entry)."""


def test_chunked_prefill_workspace_is_one_cache_row_wide(backend: Backend, make_builder):
    cam = batch.make_cam(batch.BATCH_SPECS["mixed_medium"], block_size=16, device=backend.device)
    meta = make_builder(block_size=16).build(cam)
    assert meta.prefill is not None and meta.prefill.chunked_context is not None
    workspace = meta.prefill.chunked_context.workspace
    dims = DEEPSEEK_R1.dims
    width = dims.kv_lora_rank + dims.qk_rope_head_dim
    assert workspace.shape[-1] == width, (
        f"chunked-prefill workspace: {workspace.shape[-1]} columns, expected kv_lora_rank + "
        f"qk_rope_head_dim = {width} (the cache row it gathers), not the q·k head dim "
        f"{dims.qk_nope_head_dim + dims.qk_rope_head_dim}"
    )
    assert workspace.dtype == torch.bfloat16, f"workspace dtype {workspace.dtype}, expected bf16"


def test_fields_dropped_on_purpose_are_pinned():
    found = {name: tuple(sorted(d)) for name, d in transforms.DROPPED_ON_PURPOSE.items()}
    assert found == PINNED_DROPPED, (
        f"DROPPED_ON_PURPOSE changed: {found}, pinned {PINNED_DROPPED}; a dropped field is "
        f"no longer checked to survive its transformation: review, then update the pin"
    )
    unexplained = [
        f"{name}: {field}"
        for name, dropped in transforms.DROPPED_ON_PURPOSE.items()
        for field, why in dropped.items()
        if not why.strip()
    ]
    assert not unexplained, f"dropped without a reason: {unexplained}"
