"""Self-tests of the planner's buffer sizing, checked against AITER's
``get_mla_metadata_info_v1`` (``aiter/ops/attention.py`` in ROCm/aiter)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conformance.errors import PlanError
from conformance.persistent import plan_persistent_decode
from conformance.persistent.sizing import (
    UNWRITTEN,
    allocate_metadata_buffers,
    metadata_buffer_sizes,
)

from plancall import BF16, FP8_FN, FP8_FNUZ, plan_args

pytestmark = pytest.mark.selftest


# ---------------------------------------------------------------------------------------
# Buffer sizing (AITER's get_mla_metadata_info_v1)


@pytest.mark.parametrize(
    ("arch", "batch", "sq", "heads", "q", "kv", "cus", "kwargs", "expected"),
    [
        # T = ceil(16/128) = 1: max_work = (3+8-1), partial = min(3+7, 2*7)
        ("gfx942", 3, 1, 16, BF16, BF16, 8, {}, (9, 10, 4, 3, 10)),
        # #3855: partial = max(min(767, 510), 512 + min(256, 32*512)) = 768, not 512*32
        (
            "gfx942",
            512,
            1,
            16,
            BF16,
            BF16,
            256,
            {"max_split_per_batch": 32},
            (257, 767, 513, 512, 768),
        ),
        # folded bf16 128 heads: default T = ceil(256/16) = 16
        ("gfx942", 4, 2, 128, BF16, BF16, 304, {}, (305, 4912, 65, 64, 4912)),
        # gfx950 bf16 48 heads, S 4: T = S = 4
        ("gfx950", 2, 4, 48, BF16, BF16, 256, {}, (257, 1028, 9, 8, 1028)),
        # gfx950 fp8 32 heads, S 3: T = ceil(96/64) = 2
        ("gfx950", 5, 3, 32, FP8_FN, FP8_FN, 80, {}, (81, 168, 11, 10, 168)),
        # gfx950 bf16 128 heads, S 2: T = S = 2 (2*128 > 128)
        ("gfx950", 3, 2, 128, BF16, BF16, 256, {}, (257, 516, 7, 6, 516)),
        # gfx942 fp8 64 heads S 1: T = ceil(64/128) = 1
        ("gfx942", 6, 1, 64, FP8_FNUZ, FP8_FNUZ, 304, {}, (305, 309, 7, 6, 309)),
        # triton 128 heads, S 4: fold 2 x 4 tiles = 8
        ("triton", 2, 4, 128, BF16, BF16, 132, {}, (133, 1064, 17, 16, 1064)),
        # triton 16 heads, S 4: 4*16 <= 64, one tile
        ("triton", 2, 4, 16, BF16, BF16, 132, {}, (133, 133, 3, 2, 133)),
        # not fast mode: tile_cnt * max_splits
        ("gfx942", 3, 1, 16, BF16, BF16, 8, {"fast_mode": False}, (9, 24, 4, 3, 24)),
        # sparse: eff_sq 1, B' = B * S = 8
        ("gfx942", 2, 4, 16, BF16, BF16, 8, {"is_sparse": True}, (9, 15, 9, 8, 14)),
    ],
)
def test_metadata_buffer_sizes_follow_get_mla_metadata_info_v1(
    arch: str,
    batch: int,
    sq: int,
    heads: int,
    q: torch.dtype,
    kv: torch.dtype,
    cus: int,
    kwargs: dict[str, Any],
    expected: tuple[int, int, int, int, int],
) -> None:
    sizes = metadata_buffer_sizes(batch, sq, heads, q, kv, arch=arch, num_cus=cus, **kwargs)
    wip, max_work, ri, tiles, partial = expected
    assert sizes == (
        ((2,), torch.uint64),
        ((wip,), torch.int32),
        ((max_work, 8), torch.int32),
        ((ri,), torch.int32),
        ((tiles, 2), torch.int32),
        ((partial,), torch.int32),
    )


def test_planner_buffers_have_the_info_sizes() -> None:
    args = plan_args([2] * 4, [100, 200, 300, 400], num_heads_q=128, num_cus=304)
    plan = plan_persistent_decode(**args)
    sizes = metadata_buffer_sizes(4, 2, 128, BF16, BF16, arch="gfx942", num_cus=304)
    shapes = [
        tuple(getattr(plan, n).shape)
        for n in (
            "work_indptr",
            "work_info_set",
            "reduce_indptr",
            "reduce_final_map",
            "reduce_partial_map",
        )
    ]
    assert shapes == [shape for shape, _ in sizes[1:]]


def test_allocate_metadata_buffers_fills_five_int32_buffers() -> None:
    sizes = metadata_buffer_sizes(3, 1, 16, BF16, BF16, arch="gfx942", num_cus=8)
    buffers = allocate_metadata_buffers(sizes)
    assert list(buffers) == [
        "work_indptr",
        "work_info_set",
        "reduce_indptr",
        "reduce_final_map",
        "reduce_partial_map",
    ]
    assert buffers["work_info_set"].shape == (10, 8)
    assert all(b.dtype == torch.int32 and (b == UNWRITTEN).all() for b in buffers.values())


def test_sizing_rejects_none_dtype() -> None:
    with pytest.raises(PlanError, match=r"^kv_dtype: .*None"):
        metadata_buffer_sizes(3, 1, 16, BF16, None, arch="gfx942", num_cus=8)  # type: ignore[arg-type]
