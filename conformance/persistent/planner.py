"""Reference persistent-decode planner: AITER's v1.2 fast-mode serial planner, in Python.

Follows ``kn_get_mla_metadata_v1_2`` (``csrc/kernels/mla/metadata/v1_2_device.cuh``) and
research note aiter_persistent_mla.md §2.1-2.3, with the CU (SM) count explicit and the
arch-specific decisions taken from a profile (profiles.py). It reproduces every region
AITER writes (`WorkPlan.written_regions`); every other entry is `UNWRITTEN`.

Two walks produce the same plan: `_walk_literal` transcribes AITER's loop fragment by
fragment (kept as the readable reference and for negative controls); `_walk_fast`, the
one `plan_persistent_decode` uses, loops once per program and places every run of
tiles that fits whole with one bisection of the prefix sum of tile costs.

One deliberate difference: with folded heads and ``page_size > 1`` AITER reads
``kv_last_page_lens`` at the *virtual* batch id (out of range for most of them); this
planner reads the real batch's entry. AITER's folded causal trim
``ntiles - (qo_start // ratio) % uni_seqlen_qo - 1`` is reproduced as is: it over-trims
when a folded request has several qo tiles (S > 8 on gfx942/gfx950), which invariant I4
reports. Unwritten entries hold `UNWRITTEN` (-1).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np
import torch

from conformance.errors import PlanError
from conformance.persistent.plan import WorkPlan
from conformance.persistent.profiles import ArchProfile, dtype_class, get_profile
from conformance.persistent.sizing import UNWRITTEN, BufferSpec, metadata_buffer_sizes

_I64 = np.int64


def _is_power_of_two(value: object) -> bool:
    return isinstance(value, int) and value >= 1 and value & (value - 1) == 0


def _as_array(tensor: object, *, argument: str) -> np.ndarray:
    """A 1-D integer tensor (any device) as an int64 numpy array, or `PlanError`."""
    if not isinstance(tensor, torch.Tensor):
        raise PlanError(f"{argument}: expected a 1-D int32 torch.Tensor, found {type(tensor)}")
    if tensor.dim() != 1:
        raise PlanError(f"{argument}: expected a 1-D tensor, found shape {tuple(tensor.shape)}")
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise PlanError(f"{argument}: expected an int32 tensor, found dtype {tensor.dtype}")
    return tensor.detach().to("cpu").numpy().astype(_I64)


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


# ---------------------------------------------------------------------------------------
# Input validation


def _check_scalars(
    *,
    num_cus: object,
    num_heads_q: object,
    page_size: object,
    kv_granularity: object,
    max_seqlen_qo: object,
    max_split_per_batch: object,
) -> None:
    for name, value in (
        ("num_heads_q", num_heads_q),
        ("max_seqlen_qo", max_seqlen_qo),
        ("max_split_per_batch", max_split_per_batch),
        ("num_cus", num_cus),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(f"{name}: expected an int, found {value!r}")
    assert isinstance(num_cus, int) and isinstance(num_heads_q, int)  # for type checkers
    if num_cus < 1:
        raise PlanError(f"num_cus: expected >= 1, found {num_cus}")
    if num_heads_q < 8 or num_heads_q % 8 != 0:
        raise PlanError(f"num_heads_q: expected a positive multiple of 8, found {num_heads_q}")
    if not _is_power_of_two(page_size):
        raise PlanError(f"page_size: expected a power of two, found {page_size!r}")
    if not _is_power_of_two(kv_granularity):
        raise PlanError(
            f"kv_granularity: expected a power of two (pages), found {kv_granularity!r}"
        )
    if max_seqlen_qo < 1:  # type: ignore[operator]
        raise PlanError(f"max_seqlen_qo: expected >= 1, found {max_seqlen_qo}")
    if max_split_per_batch == 0:
        raise PlanError("max_split_per_batch: expected -1 (no cap) or >= 1, found 0")


def _check_batches(
    qo: np.ndarray,
    kv: np.ndarray,
    last: np.ndarray,
    *,
    max_seqlen_qo: int,
    uni_seqlen_qo: int,
    page_size: int,
    causal: bool,
) -> np.ndarray:
    """Check the index arrays; return the per-batch q lengths."""
    if kv.size < 2:
        raise PlanError(f"kv_indptr: expected length batch_size + 1 >= 2, found {kv.size}")
    batch = kv.size - 1
    if qo.size != batch + 1:
        raise PlanError(f"qo_indptr: expected length {batch + 1} (len(kv_indptr)), found {qo.size}")
    if last.size != batch:
        raise PlanError(
            f"kv_last_page_lens: expected length {batch} (batch size), found {last.size}"
        )
    if kv[0] != 0:
        raise PlanError(f"kv_indptr: expected kv_indptr[0] == 0, found {kv[0]}")
    if qo[0] != 0:
        raise PlanError(f"qo_indptr: expected qo_indptr[0] == 0, found {qo[0]}")
    pages = np.diff(kv)
    b = _first(pages < 0)
    if b is not None:
        raise PlanError(
            f"kv_indptr: expected non-decreasing, found kv_indptr[{b}]={kv[b]} > "
            f"kv_indptr[{b + 1}]={kv[b + 1]}"
        )
    q_lens = np.diff(qo)
    b = _first((q_lens < 1) | (q_lens > max_seqlen_qo))
    if b is not None:
        raise PlanError(
            f"qo_indptr: batch {b} has {q_lens[b]} q tokens (qo_indptr[{b}]="
            f"{qo[b]}, qo_indptr[{b + 1}]={qo[b + 1]}); expected "
            f"1..max_seqlen_qo={max_seqlen_qo}"
        )
    if uni_seqlen_qo > 0:
        b = _first(qo != uni_seqlen_qo * np.arange(batch + 1, dtype=_I64))
        if b is not None:
            raise PlanError(
                f"uni_seqlen_qo: {uni_seqlen_qo} disagrees with qo_indptr[{b}]="
                f"{qo[b]} (expected {uni_seqlen_qo * b})"
            )
    if page_size == 1:
        tokens = pages
    else:
        b = _first((pages > 0) & ((last < 1) | (last > page_size)))
        if b is not None:
            raise PlanError(
                f"kv_last_page_lens: batch {b} has {last[b]} tokens in its last "
                f"page; expected 1..page_size={page_size}"
            )
        tokens = np.where(pages > 0, (pages - 1) * page_size + last, 0)
    if causal:
        b = _first(tokens < q_lens)
        if b is not None:
            raise PlanError(
                f"kv_indptr: batch {b} has {tokens[b]} kv tokens, fewer than its "
                f"{q_lens[b]} q tokens; causal decode needs kv length >= q length "
                f"(max_seqlen_qo={max_seqlen_qo})"
            )
    return q_lens


# ---------------------------------------------------------------------------------------
# Setup: one row per qo tile, in AITER's (virtual batch, tile) order


@dataclass(frozen=True)
class _Setup:
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


def _setup(
    qo: np.ndarray,
    kv: np.ndarray,
    last: np.ndarray,
    q_lens: np.ndarray,
    *,
    profile: ArchProfile,
    ratio: int,
    heads: int,
    packed_rows: int,
    splits: bool,
    uni_seqlen_qo: int,
    page_size: int,
    kv_granularity: int,
    causal: bool,
    max_seqlen_qo: int,
    num_heads_q: int,
    num_cu: int,
    max_split_per_batch: int,
) -> tuple[_Setup, int, int]:
    """Expand batches into virtual batches and tiles; return (setup, num_splits, sum_blocks)."""
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
        ntiles = np.ones(num_vb, dtype=_I64)
    elif 2 * heads > packed_rows:
        ntiles = seqlen.copy()
    else:
        ntiles = -(-seqlen * heads // packed_rows)
    tsize = -(-seqlen // ntiles)
    v = _first((ntiles - 1) * tsize >= seqlen)
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

    overhead = max(1, -(-16 // page_size))
    num_splits = num_cu if max_split_per_batch < 0 else min(num_cu, max_split_per_batch * num_vb)
    sum_blocks = int(((nblk + overhead) * ntiles).sum())
    payload = -(-sum_blocks // num_splits) + overhead
    setup = _Setup(
        vb=vb,
        num_blocks=nblk[vb],
        kv_begin=kv_begin[vb],
        kv_end=kv_end[vb],
        tail=tail,
        q_start=q_start,
        q_end=q_end,
        tile_size=ts,
        last_page_len=last_vb[vb],
        num_cu=num_cu,
        payload=payload,
        overhead=overhead,
        granularity=kv_granularity,
        page_size=page_size,
        tail_threshold=max_seqlen_qo,
    )
    return setup, num_splits, sum_blocks


# ---------------------------------------------------------------------------------------
# Walks


@dataclass(frozen=True)
class _WalkResult:
    works: np.ndarray  # (num_works, 8)
    work_indptr: np.ndarray  # (num_cu + 1,)
    group_sizes: np.ndarray  # (num_tiles,): reduce group size per tile, 0 when unsplit
    partial_map: np.ndarray  # (num_partials,)


def _left_over(i: int, s: _Setup) -> PlanError:
    return PlanError(
        f"num_cus: {s.num_cu} programs did not take every qo tile (tile {i} of "
        f"{s.num_tiles}, virtual batch {int(s.vb[i])} left); this breaks AITER's "
        f"v1.2 budget argument"
    )


def _walk_literal(s: _Setup, *, tail_rule: bool = True) -> _WalkResult:
    """AITER's serial loop, fragment by fragment. ``tail_rule=False`` drops #2106."""
    vb_l, nblk_l, kvb_l, kve_l, bt_l = (
        a.tolist() for a in (s.vb, s.num_blocks, s.kv_begin, s.kv_end, s.tail)
    )
    qs_l, qe_l, ts_l, last_l = (
        a.tolist() for a in (s.q_start, s.q_end, s.tile_size, s.last_page_len)
    )
    gran, ovh, ps, thr = s.granularity, s.overhead, s.page_size, s.tail_threshold
    page1 = ps == 1
    works: list[tuple[int, ...]] = []
    work_indptr = [0] * (s.num_cu + 1)
    group_sizes = [0] * s.num_tiles
    partial_map: list[int] = []
    i = blk = nsplit = partial_idx = 0
    tail_done = False
    for cid in range(s.num_cu):
        remain = s.payload
        while i < s.num_tiles:
            r = nblk_l[i] - blk
            ks = kvb_l[i] + blk * gran
            kve, bt, ts = kve_l[i], bt_l[i], ts_l[i]
            if remain >= r + ovh or tail_done:  # last (or only) fragment of the tile
                if page1:
                    ke = min(ks + r * gran, kve - bt)
                    if 0 < kve - ke < thr or tail_done:
                        ke = kve - bt
                    off = kve - ke
                else:
                    ke = min(ks + r * gran, kve)
                    off = 0 if ke == kve else (kve - ke - 1) * ps + last_l[i]
                loc = -1
                if nsplit:
                    loc = partial_idx
                    group_sizes[i] = nsplit + 1
                    partial_map.extend(partial_idx - (nsplit - k) * ts for k in range(nsplit + 1))
                    partial_idx += ts
                works.append((vb_l[i], loc, qs_l[i], qe_l[i], ks, ke, off, 0))
                remain -= r + ovh
                i += 1
                blk = nsplit = 0
                tail_done = False
                continue
            if remain > ovh:  # a fragment that fills this program
                c = remain - ovh
                if page1:
                    ke = min(ks + c * gran, kve - bt)
                    if tail_rule and kve - ke < thr:
                        tail_done = True  # absorb the short tail: re-loop, over budget
                        continue
                    off = kve - ke
                else:
                    ke = min(ks + c * gran, kve)
                    off = 0 if ke == kve else (kve - ke - 1) * ps + last_l[i]
                works.append((vb_l[i], partial_idx, qs_l[i], qe_l[i], ks, ke, off, 0))
                partial_idx += ts
                blk += c
                nsplit += 1
            break
        work_indptr[cid + 1] = len(works)
    if i < s.num_tiles:
        raise _left_over(i, s)
    return _WalkResult(
        works=np.array(works, dtype=_I64).reshape(-1, 8),
        work_indptr=np.array(work_indptr, dtype=_I64),
        group_sizes=np.array(group_sizes, dtype=_I64),
        partial_map=np.array(partial_map, dtype=_I64),
    )


def _whole_tile_rows(s: _Setup) -> np.ndarray:
    """The work row of every tile as one unsplit work (its kv end trimmed by the tail)."""
    rows = np.zeros((s.num_tiles, 8), dtype=_I64)
    rows[:, 0] = s.vb
    rows[:, 1] = -1
    rows[:, 2] = s.q_start
    rows[:, 3] = s.q_end
    rows[:, 4] = s.kv_begin
    rows[:, 5] = s.kv_end - s.tail  # tail is 0 unless page 1 and causal
    rows[:, 6] = s.tail
    return rows


def _walk_fast(s: _Setup) -> _WalkResult:
    """The same walk, one iteration per program: runs of whole tiles go in by bisection.

    A program starts with the rest of a split tile (if any), then takes the longest run
    of tiles whose costs (blocks + overhead) fit its remaining payload, then possibly the
    first fragment of the next tile (or that whole tile, absorbing a short tail). Works
    come out in tile order, so the work list is every tile's whole-tile row repeated by
    its fragment count, with the fragment rows written over it at their work ids.
    """
    n_tiles, gran, ovh, ps, thr = (
        s.num_tiles,
        s.granularity,
        s.overhead,
        s.page_size,
        s.tail_threshold,
    )
    page1 = ps == 1
    prefix = [0, *np.cumsum(s.num_blocks + ovh).tolist()]  # cost of the tiles before i
    vb_l, nblk_l, kvb_l, kve_l, bt_l, ts_l, qs_l, qe_l, last_l = (
        a.tolist()
        for a in (
            s.vb,
            s.num_blocks,
            s.kv_begin,
            s.kv_end,
            s.tail,
            s.tile_size,
            s.q_start,
            s.q_end,
            s.last_page_len,
        )
    )
    frag_rows: list[tuple[int, ...]] = []
    frag_ids: list[int] = []
    work_indptr = [0] * (s.num_cu + 1)
    split_tiles: list[int] = []
    split_sizes: list[int] = []
    partial_map: list[int] = []
    num_works = i = blk = nsplit = partial_idx = 0

    def kv_offset(i: int, ke: int) -> int:
        kve = kve_l[i]
        if page1 or ke == kve:
            return kve - ke
        return (kve - ke - 1) * ps + last_l[i]

    for cid in range(s.num_cu):
        if i >= n_tiles:
            work_indptr[cid + 1 :] = [num_works] * (s.num_cu - cid)
            break
        remain = s.payload
        while True:
            if blk == 0 and remain > 0:  # the run of whole tiles that fits
                j = bisect_right(prefix, prefix[i] + remain, lo=i) - 1
                if j > i:
                    num_works += j - i
                    remain -= prefix[j] - prefix[i]
                    i = j
            if i >= n_tiles:
                break
            r = nblk_l[i] - blk
            ks = kvb_l[i] + blk * gran
            finish = blk > 0 and remain >= r + ovh  # the rest of a split tile fits
            if not finish:
                if remain <= ovh:  # too little left: this program is closed
                    break
                c = remain - ovh
                ke = min(ks + c * gran, kve_l[i] - bt_l[i] if page1 else kve_l[i])
                if not (page1 and kve_l[i] - ke < thr):  # a fragment filling the program
                    frag_ids.append(num_works)
                    frag_rows.append(
                        (vb_l[i], partial_idx, qs_l[i], qe_l[i], ks, ke, kv_offset(i, ke), 0)
                    )
                    num_works += 1
                    partial_idx += ts_l[i]
                    blk += c
                    nsplit += 1
                    break
                # else: absorb the short tail into this program, over budget
            if nsplit:  # last fragment of a split tile
                ts = ts_l[i]
                ke = kve_l[i] - bt_l[i] if page1 else kve_l[i]
                frag_ids.append(num_works)
                frag_rows.append(
                    (vb_l[i], partial_idx, qs_l[i], qe_l[i], ks, ke, kv_offset(i, ke), 0)
                )
                split_tiles.append(i)
                split_sizes.append(nsplit + 1)
                partial_map.extend(range(partial_idx - nsplit * ts, partial_idx + 1, ts))
                partial_idx += ts
            num_works += 1  # (an unsplit tile is its whole-tile row)
            i += 1
            blk = nsplit = 0
            if not finish:
                break
            remain -= r + ovh
        work_indptr[cid + 1] = num_works
    if i < n_tiles:
        raise _left_over(i, s)

    group_sizes = np.zeros(n_tiles, dtype=_I64)
    group_sizes[split_tiles] = split_sizes
    works = np.repeat(_whole_tile_rows(s), np.where(group_sizes > 0, group_sizes, 1), axis=0)
    if frag_rows:
        works[frag_ids] = frag_rows
    return _WalkResult(
        works=works,
        work_indptr=np.array(work_indptr, dtype=_I64),
        group_sizes=group_sizes,
        partial_map=np.array(partial_map, dtype=_I64),
    )


# ---------------------------------------------------------------------------------------
# Public entry point


def _plan(
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    *,
    num_heads_q: int,
    max_seqlen_qo: int,
    uni_seqlen_qo: int,
    page_size: int,
    kv_granularity: int,
    causal: bool,
    max_split_per_batch: int,
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
    arch: str,
    num_cus: int,
    walk: str = "fast",
    tail_rule: bool = True,
) -> WorkPlan:
    """`plan_persistent_decode` with a choice of walk (``"fast"`` or ``"literal"``).

    ``tail_rule=False`` (literal walk only) drops the #2106 tail rule: a negative control.
    """
    profile = get_profile(arch)
    _check_scalars(
        num_cus=num_cus,
        num_heads_q=num_heads_q,
        page_size=page_size,
        kv_granularity=kv_granularity,
        max_seqlen_qo=max_seqlen_qo,
        max_split_per_batch=max_split_per_batch,
    )
    if isinstance(uni_seqlen_qo, bool) or not isinstance(uni_seqlen_qo, int):
        raise PlanError(f"uni_seqlen_qo: expected an int, found {uni_seqlen_qo!r}")
    q_cls = dtype_class(q_dtype, argument="q_dtype")
    kv_cls = dtype_class(kv_dtype, argument="kv_dtype")
    if q_cls == "fp8" and kv_cls != "fp8":
        raise PlanError(
            f"q_dtype: fp8 q ({q_dtype}) with {kv_dtype} kv (kv_dtype) is not a "
            f"supported persistent MLA combination"
        )
    causal = bool(causal)
    qo = _as_array(qo_indptr, argument="qo_indptr")
    kv = _as_array(kv_indptr, argument="kv_indptr")
    last = _as_array(kv_last_page_lens, argument="kv_last_page_lens")
    q_lens = _check_batches(
        qo,
        kv,
        last,
        max_seqlen_qo=max_seqlen_qo,
        uni_seqlen_qo=uni_seqlen_qo,
        page_size=page_size,
        causal=causal,
    )

    layout = profile.head_layout(num_heads_q, max_seqlen_qo, q_cls, kv_cls)
    ratio, heads = layout.fold_ratio, layout.heads_per_work
    if ratio > 1 and uni_seqlen_qo <= 0:
        raise PlanError(
            f"uni_seqlen_qo: folding {num_heads_q} heads into {ratio} groups of "
            f"{heads} ({arch}) needs uni_seqlen_qo > 0, found {uni_seqlen_qo}"
        )
    packed_rows = profile.packed_rows_per_program(heads, max_seqlen_qo, q_cls, kv_cls)
    splits = profile.qo_splits(
        num_heads_q=num_heads_q,
        heads_per_work=heads,
        max_seqlen_qo=max_seqlen_qo,
        packed_rows=packed_rows,
    )
    setup, num_splits, sum_blocks = _setup(
        qo,
        kv,
        last,
        q_lens,
        profile=profile,
        ratio=ratio,
        heads=heads,
        packed_rows=packed_rows,
        splits=splits,
        uni_seqlen_qo=uni_seqlen_qo,
        page_size=page_size,
        kv_granularity=kv_granularity,
        causal=causal,
        max_seqlen_qo=max_seqlen_qo,
        num_heads_q=num_heads_q,
        num_cu=num_cus * profile.occupancy,
        max_split_per_batch=max_split_per_batch,
    )
    if walk == "fast" and tail_rule:
        result = _walk_fast(setup)
    elif walk in ("fast", "literal"):
        result = _walk_literal(setup, tail_rule=tail_rule)
    else:
        raise PlanError(f"walk: expected 'fast' or 'literal', found {walk!r}")

    sizes = metadata_buffer_sizes(
        q_lens.size,
        max_seqlen_qo,
        num_heads_q,
        q_dtype,
        kv_dtype,
        arch=arch,
        num_cus=num_cus,
        max_split_per_batch=max_split_per_batch,
    )
    params: dict[str, object] = {
        "qo_indptr": qo.tolist(),
        "kv_indptr": kv.tolist(),
        "kv_last_page_lens": last.tolist(),
        "num_heads_q": num_heads_q,
        "max_seqlen_qo": max_seqlen_qo,
        "uni_seqlen_qo": uni_seqlen_qo,
        "page_size": page_size,
        "kv_granularity": kv_granularity,
        "causal": causal,
        "max_split_per_batch": max_split_per_batch,
        "q_dtype": str(q_dtype),
        "kv_dtype": str(kv_dtype),
        "arch": arch,
        "num_cus": num_cus,
        # derived
        "fold_ratio": ratio,
        "heads_per_work": heads,
        "native": layout.native,
        "num_tiles": setup.num_tiles,
        "packed_rows_per_program": packed_rows,
        "qo_splits": splits,
        "num_splits": num_splits,
        "overhead": setup.overhead,
        "payload": setup.payload,
        "sum_blocks": sum_blocks,
        "planner": f"aiter v1.2 serial, profile {profile.name}",
    }
    return _assemble(
        result,
        setup,
        sizes,
        profile=profile,
        params=params,
        fold_ratio=ratio,
        heads_per_work=heads,
        max_seqlen_qo=max_seqlen_qo,
    )


def plan_persistent_decode(
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    *,
    num_heads_q: int,
    max_seqlen_qo: int,
    uni_seqlen_qo: int,
    page_size: int,
    kv_granularity: int,
    causal: bool,
    max_split_per_batch: int,
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
    arch: str,
    num_cus: int,
) -> WorkPlan:
    """Plan a persistent MLA decode exactly as AITER's v1.2 fast-mode serial planner would.

    ``qo_indptr``/``kv_indptr`` ([B+1]) are cumulative q-token and kv-page counts (both
    starting at 0), ``kv_last_page_lens`` ([B]) the tokens in each last page (read only
    when ``page_size > 1``); any device, returned buffers are on the CPU.
    ``uni_seqlen_qo > 0`` declares every request has that many q tokens (required when
    heads are folded), ``<= 0`` reads lengths from ``qo_indptr``. ``kv_granularity`` is
    in pages. ``max_split_per_batch < 0`` means no cap; a positive value caps the number
    of programs that receive work at ``max_split_per_batch * virtual batches`` (a global
    cap, as in AITER). ``q_dtype``/``kv_dtype`` must be explicit (None is an error).
    ``num_cus`` is the CU (SM) count. Bad input raises `PlanError` naming the argument.
    """
    return _plan(
        qo_indptr,
        kv_indptr,
        kv_last_page_lens,
        num_heads_q=num_heads_q,
        max_seqlen_qo=max_seqlen_qo,
        uni_seqlen_qo=uni_seqlen_qo,
        page_size=page_size,
        kv_granularity=kv_granularity,
        causal=causal,
        max_split_per_batch=max_split_per_batch,
        q_dtype=q_dtype,
        kv_dtype=kv_dtype,
        arch=arch,
        num_cus=num_cus,
    )


def _assemble(
    result: _WalkResult,
    setup: _Setup,
    sizes: tuple[BufferSpec, ...],
    *,
    profile: ArchProfile,
    params: dict[str, object],
    fold_ratio: int,
    heads_per_work: int,
    max_seqlen_qo: int,
) -> WorkPlan:
    """Write a walk into buffers sized like ``get_mla_metadata_info_v1`` (numpy, no threads)."""
    num_works = result.works.shape[0]
    num_tiles = setup.num_tiles
    num_partials = result.partial_map.size
    (wip_len,), (max_work, _), (ri_len,), _, (pm_len,) = (shape for shape, _ in sizes[1:])
    tile_cnt = ri_len - 1
    for name, used, size, what in (
        ("work_info_set", num_works, max_work, "works"),
        ("reduce_final_map", num_tiles, tile_cnt, "qo tiles"),
        ("reduce_partial_map", num_partials, pm_len, "partials"),
        ("work_indptr", result.work_indptr.size, wip_len, "entries"),
    ):
        if used > size:
            raise PlanError(
                f"{name}: the plan has {used} {what} but get_mla_metadata_info_v1 "
                f"sizing gives {size} ({profile.name}); the sizing rule is violated"
            )

    work_info_set = np.full((max_work, 8), UNWRITTEN, dtype=np.int32)
    work_info_set[:num_works] = result.works
    reduce_indptr = np.empty(ri_len, dtype=np.int32)
    reduce_indptr[0] = 0
    ends = np.cumsum(result.group_sizes)
    reduce_indptr[1 : num_tiles + 1] = ends
    reduce_indptr[num_tiles + 1 :] = ends[-1] if num_tiles else 0
    final_map = np.full((tile_cnt, 2), UNWRITTEN, dtype=np.int32)
    split = np.flatnonzero(result.group_sizes)
    final_map[split, 0] = setup.q_start[split]
    final_map[split, 1] = setup.q_end[split]
    partial_map = np.full(pm_len, UNWRITTEN, dtype=np.int32)
    partial_map[:num_partials] = result.partial_map
    return WorkPlan(
        work_indptr=torch.from_numpy(result.work_indptr.astype(np.int32)),
        work_info_set=torch.from_numpy(work_info_set),
        reduce_indptr=torch.from_numpy(reduce_indptr),
        reduce_final_map=torch.from_numpy(final_map),
        reduce_partial_map=torch.from_numpy(partial_map),
        num_works=num_works,
        num_partials=num_partials,
        num_tiles=num_tiles,
        fold_ratio=fold_ratio,
        heads_per_work=heads_per_work,
        max_seqlen_qo=max_seqlen_qo,
        params=params,
    )
