"""Reference persistent-decode planner: AITER's v1.2 fast-mode serial planner, in Python.

Follows ``kn_get_mla_metadata_v1_2`` (``csrc/kernels/mla/metadata/v1_2_device.cuh`` in
ROCm/aiter; worked examples in docs/planner.md), with the CU (SM) count explicit and the
arch-specific decisions taken from a profile (profiles.py). It reproduces every region
AITER writes (`WorkPlan.written_regions`); every other entry is `UNWRITTEN`.

The call's checks live in checks.py, its derived scalars and the tile expansion in
setup.py, the two walks (literal and fast) in walks.py; this module runs them and writes
the buffers.

One deliberate difference: with folded heads and ``page_size > 1`` AITER reads
``kv_last_page_lens`` at the *virtual* batch id (out of range for most of them); this
planner reads the real batch's entry. AITER's folded causal trim
``ntiles - (qo_start // ratio) % uni_seqlen_qo - 1`` is reproduced as is: it over-trims
when a folded request has several qo tiles (S > 8 on gfx942/gfx950), which invariant I4
reports. Unwritten entries hold `UNWRITTEN` (-1).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import numpy as np
import torch

from conformance.errors import PlanError
from conformance.persistent.checks import (
    as_array,
    check_batches,
    check_call_scalars,
    check_keywords,
)
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from conformance.persistent.setup import PlanShape, TileSetup, derive_shape, tile_setup
from conformance.persistent.sizing import UNWRITTEN
from conformance.persistent.walks import WalkResult, walk_fast, walk_literal


def plan_params(
    call: dict[str, Any], shape: PlanShape, *, num_tiles: int, payload: int, sum_blocks: int
) -> dict[str, object]:
    """The plan's provenance: the call (dtypes as strings) and the derived scalars."""
    return {
        **call,
        "causal": bool(call["causal"]),
        "q_dtype": str(call["q_dtype"]),
        "kv_dtype": str(call["kv_dtype"]),
        "fold_ratio": shape.fold_ratio,
        "heads_per_work": shape.heads_per_work,
        "native": shape.layout.native,
        "num_tiles": num_tiles,
        "packed_rows_per_program": shape.packed_rows,
        "qo_splits": shape.qo_splits,
        "num_splits": shape.num_splits,
        "overhead": shape.overhead,
        "payload": payload,
        "sum_blocks": sum_blocks,
        "planner": f"aiter v1.2 serial, profile {shape.profile.name}",
    }


def plan_with_walk(
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    *,
    walk: str = "fast",
    tail_rule: bool = True,
    **call: Any,
) -> WorkPlan:
    """`plan_persistent_decode` (keywords in ``call``) with a choice of walk.

    ``walk`` is ``"fast"`` or ``"literal"``; ``tail_rule=False`` (literal walk only) drops
    the #2106 tail rule: a negative control.
    """
    q_cls, kv_cls = check_call_scalars(call)
    qo = as_array(qo_indptr, argument="qo_indptr")
    kv = as_array(kv_indptr, argument="kv_indptr")
    last = as_array(kv_last_page_lens, argument="kv_last_page_lens")
    q_lens = check_batches(
        qo,
        kv,
        last,
        max_seqlen_qo=call["max_seqlen_qo"],
        uni_seqlen_qo=call["uni_seqlen_qo"],
        page_size=call["page_size"],
        causal=bool(call["causal"]),
    )
    shape = derive_shape(call, batch_size=q_lens.size, q_cls=q_cls, kv_cls=kv_cls)
    setup, sum_blocks = tile_setup(qo, kv, last, q_lens, shape=shape, call=call)
    if walk == "fast" and tail_rule:
        result = walk_fast(setup)
    elif walk in ("fast", "literal"):
        result = walk_literal(setup, tail_rule=tail_rule)
    else:
        raise PlanError(f"walk: expected 'fast' or 'literal', found {walk!r}")
    inputs = {
        "qo_indptr": qo.tolist(),
        "kv_indptr": kv.tolist(),
        "kv_last_page_lens": last.tolist(),
    }
    params = plan_params(
        {**inputs, **call},
        shape,
        num_tiles=setup.num_tiles,
        payload=setup.payload,
        sum_blocks=sum_blocks,
    )
    return _assemble(result, setup, shape, params=params, max_seqlen_qo=call["max_seqlen_qo"])


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
    call = dict(locals())
    inputs = (call.pop("qo_indptr"), call.pop("kv_indptr"), call.pop("kv_last_page_lens"))
    return plan_with_walk(*inputs, **call)


def _assemble(
    result: WalkResult,
    setup: TileSetup,
    shape: PlanShape,
    *,
    params: dict[str, object],
    max_seqlen_qo: int,
) -> WorkPlan:
    """Write a walk into buffers sized like ``get_mla_metadata_info_v1`` (numpy, no threads)."""
    num_works = result.works.shape[0]
    num_tiles = setup.num_tiles
    num_partials = result.partial_map.size
    (wip_len,), (max_work, _), (ri_len,), _, (pm_len,) = (dims for dims, _ in shape.sizes[1:])
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
                f"sizing gives {size} ({shape.profile.name}); the sizing rule is violated"
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
    buffers = (  # in PLAN_BUFFERS order
        result.work_indptr.astype(np.int32),
        work_info_set,
        reduce_indptr,
        final_map,
        partial_map,
    )
    return WorkPlan(
        **{name: torch.from_numpy(b) for name, b in zip(PLAN_BUFFERS, buffers, strict=True)},
        num_works=num_works,
        num_partials=num_partials,
        num_tiles=num_tiles,
        fold_ratio=shape.fold_ratio,
        heads_per_work=shape.heads_per_work,
        max_seqlen_qo=max_seqlen_qo,
        params=params,
    )


def takes_planner_call(method: Any) -> Any:
    """Decorate a planner's ``__call__(self, qo, kv, last, **keywords)``: it advertises
    `plan_persistent_decode`'s signature and rejects a call without exactly its keywords."""
    reference = inspect.signature(plan_persistent_decode)
    self_param = next(iter(inspect.signature(method).parameters.values()))

    @functools.wraps(method)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            call = reference.bind(*args, **kwargs).arguments
        except TypeError as error:
            raise PlanError(f"{type(self).__name__}: {error}") from None
        inputs = (call.pop("qo_indptr"), call.pop("kv_indptr"), call.pop("kv_last_page_lens"))
        check_keywords(call, planner=type(self).__name__)
        return method(self, *inputs, **call)

    checked.__signature__ = reference.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *reference.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )
    return checked
