"""Buffer sizes of a persistent-decode plan, as AITER's ``get_mla_metadata_info_v1`` gives them.

``aiter/ops/attention.py`` in ROCm/aiter (the split-tile bound with ``max_split_per_batch``
as fixed by AITER #3855); the CU (or SM) count is an explicit argument
instead of ``get_cu_num()``. Only the fast-mode / non-intra-batch layout is modelled
(``intra_batch_mode`` selects planner v1_0, which the suite does not reproduce).
"""

from __future__ import annotations

import torch

from conformance.errors import PlanError
from conformance.persistent.plan import PLAN_BUFFERS
from conformance.persistent.profiles import dtype_class, get_profile

BufferSpec = tuple[tuple[int, ...], torch.dtype]
"""A buffer's (shape, dtype)."""

UNWRITTEN = -1
"""Value of every int32 buffer entry a planner does not write (AITER leaves them as
``torch.empty`` left them; the reference fills this so that runs are deterministic)."""

METADATA_BUFFERS: tuple[str, ...] = ("work_metadata_ptrs", *PLAN_BUFFERS)
"""Buffer names in ``get_mla_metadata_info_v1`` order."""


def metadata_buffer_sizes(
    batch_size: int,
    max_seqlen_qo: int,
    num_heads_q: int,
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
    *,
    arch: str,
    num_cus: int,
    is_sparse: bool = False,
    fast_mode: bool = True,
    max_split_per_batch: int = -1,
) -> tuple[BufferSpec, ...]:
    """The six (shape, dtype) pairs of ``get_mla_metadata_info_v1``, in its order.

    Order: ``work_metadata_ptrs (2,) uint64``, ``work_indptr``, ``work_info_set``,
    ``reduce_indptr``, ``reduce_final_map``, ``reduce_partial_map`` (all int32). Shapes
    are always tuples (AITER returns bare ints for the 1-D ones).
    """
    profile = get_profile(arch)
    if num_cus < 1:
        raise PlanError(f"num_cus: expected >= 1, found {num_cus}")
    if batch_size < 1:
        raise PlanError(f"batch_size: expected >= 1, found {batch_size}")
    if max_seqlen_qo < 1:
        raise PlanError(f"max_seqlen_qo: expected >= 1, found {max_seqlen_qo}")
    if num_heads_q < 1 or num_heads_q % 8 != 0:
        raise PlanError(f"num_heads_q: expected a positive multiple of 8, found {num_heads_q}")
    q_cls = dtype_class(q_dtype, argument="q_dtype")
    kv_cls = dtype_class(kv_dtype, argument="kv_dtype")

    max_splits = num_cus * profile.occupancy
    eff_sq = 1 if is_sparse else max_seqlen_qo
    tiles_per_batch = profile.sizing_tiles_per_batch(num_heads_q, eff_sq, q_cls, kv_cls)
    batches = batch_size * max_seqlen_qo if is_sparse else batch_size
    tile_cnt = batches * tiles_per_batch

    if fast_mode:
        max_work = (batches + max_splits - 1) * tiles_per_batch
        max_split_tiles = min(batches + max_splits - 1, 2 * (max_splits - 1)) * tiles_per_batch
    else:
        max_work = max_split_tiles = tile_cnt * max_splits
    if max_split_per_batch > 0:  # AITER #3855: the split cap is global, not per tile
        cap = min(max_splits, max_split_per_batch * batches)
        max_split_tiles = max(max_split_tiles, tile_cnt + cap)

    return (
        ((2,), torch.uint64),
        ((max_splits + 1,), torch.int32),
        ((max_work, 8), torch.int32),
        ((tile_cnt + 1,), torch.int32),
        ((tile_cnt, 2), torch.int32),
        ((max_split_tiles,), torch.int32),
    )


def allocate_metadata_buffers(
    sizes: tuple[BufferSpec, ...],
    *,
    device: torch.device | str = "cpu",
    fill: int = UNWRITTEN,
) -> dict[str, torch.Tensor]:
    """Allocate the five int32 plan buffers of ``sizes`` (`metadata_buffer_sizes` output).

    Returns a dict keyed by `PLAN_BUFFERS` names, every entry set to ``fill``;
    ``work_metadata_ptrs`` (device addresses) is not allocated.
    """
    if len(sizes) != len(METADATA_BUFFERS):
        raise PlanError(
            f"sizes: expected {len(METADATA_BUFFERS)} (shape, dtype) pairs, found {len(sizes)}"
        )
    buffers: dict[str, torch.Tensor] = {}
    for name, (shape, dtype) in zip(METADATA_BUFFERS[1:], sizes[1:], strict=True):
        if dtype != torch.int32:
            raise PlanError(f"sizes[{name}]: expected dtype torch.int32, found {dtype}")
        buffers[name] = torch.full(shape, fill, dtype=torch.int32, device=device)
    return buffers
