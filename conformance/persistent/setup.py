"""Derived plan scalars (`PlanShape`) and the expansion of batches into qo tiles.

`derive_shape` turns a checked planner call into the numbers every planner of the v1.2
walk needs (fold ratio, packed rows, qo splitting, program count, overhead, buffer
sizes); `tile_setup` expands the batches into one row per qo tile, in AITER's
(virtual batch, tile) order (``csrc/kernels/mla/metadata/v1_2_device.cuh`` in ROCm/aiter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from conformance.errors import PlanError
from conformance.persistent.checks import first_index
from conformance.persistent.profiles import ArchProfile, DtypeClass, HeadLayout, get_profile
from conformance.persistent.sizing import BufferSpec, metadata_buffer_sizes

_I64 = np.int64


@dataclass(frozen=True)
class PlanShape:
    """What a call fixes before any batch is read: the same for every batch of its size."""

    profile: ArchProfile
    layout: HeadLayout
    packed_rows: int
    qo_splits: bool
    num_cu: int  # persistent programs: CUs x occupancy
    num_splits: int  # the payload divisor
    overhead: int  # blocks charged per work
    sizes: tuple[BufferSpec, ...]  # get_mla_metadata_info_v1 sizes

    @property
    def fold_ratio(self) -> int:
        return self.layout.fold_ratio

    @property
    def heads_per_work(self) -> int:
        return self.layout.heads_per_work

    def num_qo_tiles(self, seqlen_qo: int) -> int:
        """qo tiles of one virtual batch with `seqlen_qo` q tokens."""
        return self.profile.num_qo_tiles(
            seqlen_qo=seqlen_qo,
            heads_per_work=self.heads_per_work,
            packed_rows=self.packed_rows,
            splits=self.qo_splits,
        )


def derive_shape(
    call: Mapping[str, Any], *, batch_size: int, q_cls: DtypeClass, kv_cls: DtypeClass
) -> PlanShape:
    """The `PlanShape` of a call whose scalars passed `check_call_scalars`."""
    arch, heads_q, max_sq = call["arch"], call["num_heads_q"], call["max_seqlen_qo"]
    profile = get_profile(arch)
    layout = profile.head_layout(heads_q, max_sq, q_cls, kv_cls)
    ratio, heads = layout.fold_ratio, layout.heads_per_work
    if ratio > 1 and call["uni_seqlen_qo"] <= 0:
        raise PlanError(
            f"uni_seqlen_qo: folding {heads_q} heads into {ratio} groups of "
            f"{heads} ({arch}) needs uni_seqlen_qo > 0, found {call['uni_seqlen_qo']}"
        )
    packed_rows = profile.packed_rows_per_program(heads, max_sq, q_cls, kv_cls)
    splits = profile.qo_splits(
        num_heads_q=heads_q, heads_per_work=heads, max_seqlen_qo=max_sq, packed_rows=packed_rows
    )
    num_cu = call["num_cus"] * profile.occupancy
    msb, num_vb = call["max_split_per_batch"], batch_size * ratio
    sizes = metadata_buffer_sizes(
        batch_size,
        max_sq,
        heads_q,
        call["q_dtype"],
        call["kv_dtype"],
        arch=arch,
        num_cus=call["num_cus"],
        max_split_per_batch=msb,
    )
    return PlanShape(
        profile=profile,
        layout=layout,
        packed_rows=packed_rows,
        qo_splits=splits,
        num_cu=num_cu,
        num_splits=num_cu if msb < 0 else min(num_cu, msb * num_vb),
        overhead=max(1, -(-16 // call["page_size"])),
        sizes=sizes,
    )


@dataclass(frozen=True)
class TileSetup:
    """Everything a walk needs; tile arrays are int64, one entry per qo tile."""

    vb: np.ndarray  # virtual batch id
    num_blocks: np.ndarray  # ceil(kv pages / granularity)
    kv_begin: np.ndarray  # pages
    kv_end: np.ndarray  # pages
    tail: np.ndarray  # causal trim of the tile (page 1), else 0
    q_start: np.ndarray
    q_end: np.ndarray
    tile_size: np.ndarray  # nominal q tokens per tile of this batch
    last_page_len: np.ndarray
    num_cu: int
    payload: int
    overhead: int
    granularity: int
    page_size: int
    tail_threshold: int

    @property
    def num_tiles(self) -> int:
        return int(self.vb.size)


def tile_setup(
    qo: np.ndarray,
    kv: np.ndarray,
    last: np.ndarray,
    q_lens: np.ndarray,
    *,
    shape: PlanShape,
    call: Mapping[str, Any],
) -> tuple[TileSetup, int]:
    """Expand batches into virtual batches and tiles; return (setup, sum_blocks)."""
    ratio, heads, packed_rows = shape.fold_ratio, shape.heads_per_work, shape.packed_rows
    splits, profile, page_size = shape.qo_splits, shape.profile, call["page_size"]
    uni_seqlen_qo, kv_granularity = call["uni_seqlen_qo"], call["kv_granularity"]
    causal, max_seqlen_qo = bool(call["causal"]), call["max_seqlen_qo"]
    num_heads_q = call["num_heads_q"]
    # Per virtual batch (head group g of batch b is virtual batch b * ratio + g).
    kv_begin = np.repeat(kv[:-1], ratio)
    kv_end = np.repeat(kv[1:], ratio)
    seqlen = np.repeat(q_lens, ratio)
    last_vb = np.repeat(last, ratio)
    num_vb = kv_begin.size
    if ratio > 1:
        q_begin = uni_seqlen_qo * np.arange(num_vb, dtype=_I64)
        q_stop = q_begin + uni_seqlen_qo
    else:
        q_begin, q_stop = qo[:-1], qo[1:]
    if not splits:
        ntiles = np.ones(kv_begin.size, dtype=_I64)
    elif 2 * heads > packed_rows:
        ntiles = seqlen.copy()
    else:
        ntiles = -(-seqlen * heads // packed_rows)
    tsize = -(-seqlen // ntiles)
    v = first_index((ntiles - 1) * tsize >= seqlen)
    if v is not None:
        raise PlanError(
            f"num_heads_q: {num_heads_q} heads with {seqlen[v]} q tokens "
            f"(max_seqlen_qo={max_seqlen_qo}) give {ntiles[v]} qo tiles of "
            f"{tsize[v]} tokens, the last one empty"
        )
    shift = kv_granularity.bit_length() - 1
    nblk = (kv_end - kv_begin + kv_granularity - 1) >> shift

    # Per tile.
    vb = np.repeat(np.arange(num_vb, dtype=_I64), ntiles)
    first_tile = np.cumsum(ntiles) - ntiles
    tile = np.arange(vb.size, dtype=_I64) - np.repeat(first_tile, ntiles)
    ts = tsize[vb]
    q_start = q_begin[vb] + tile * ts
    q_end = np.minimum(q_start + ts, q_stop[vb])
    if page_size == 1 and causal:
        nt = ntiles[vb]
        if ratio > 1 and profile.folded_batch_tail == "aiter":
            tail = nt - (q_start // ratio) % uni_seqlen_qo - 1
        else:
            tail = nt - 1 - tile
        tail = np.maximum(tail, 0)
    else:
        tail = np.zeros(vb.size, dtype=_I64)

    overhead = shape.overhead
    sum_blocks = int(((nblk + overhead) * ntiles).sum())
    payload = -(-sum_blocks // shape.num_splits) + overhead
    setup = TileSetup(
        vb=vb,
        num_blocks=nblk[vb],
        kv_begin=kv_begin[vb],
        kv_end=kv_end[vb],
        tail=tail,
        q_start=q_start,
        q_end=q_end,
        tile_size=ts,
        last_page_len=last_vb[vb],
        num_cu=shape.num_cu,
        payload=payload,
        overhead=overhead,
        granularity=kv_granularity,
        page_size=page_size,
        tail_threshold=max_seqlen_qo,
    )
    return setup, sum_blocks
