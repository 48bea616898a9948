"""The device planner's host side: buffers, launch, the plan object, the builder's choice.

`plan_on_device` answers the reference planner's call (`plan_persistent_decode`'s
arguments) with the Triton planner (kernels/planner_setup.py, kernels/triton_planner.py) on
the inputs' device. It reads no data on the host: everything it derives comes from the
call's scalars and the tensors' lengths, so a step of plan + decode + reduce over fixed
buffers (`planned_decode`) can be captured in a CUDA graph. Its `DeviceWorkPlan` reads the
counts back (one small copy) only when asked for them; a plan the reference planner would
reject raises that planner's `PlanError` there.

`builder_planner` is the planner a Triton builder uses: this one on a CUDA device unless
``MLA_TRITON_PLANNER=host``, the reference planner otherwise.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import triton

from conformance.errors import PlanError
from conformance.persistent.checks import check_call_scalars, check_index_tensor, check_lengths
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from conformance.persistent.planner import plan_params, plan_persistent_decode, takes_planner_call
from conformance.persistent.setup import PlanShape, derive_shape
from kernels import planner_chain, planner_finish, planner_setup, triton_planner

PLANNER_ENV = "MLA_TRITON_PLANNER"
"""``device`` (default) or ``host``: where a Triton builder on a CUDA device plans."""
MAX_ENTRIES = 16384
"""Most (virtual batch x qo tile) entries one planner program holds in registers."""
DEVICE_LIMIT = "beyond the device planner's limits"
"""Part of every `PlanError` the device planner raises for a batch the reference can plan."""
MAX_PROGRAMS = 8191
"""Most persistent programs (CUs x occupancy) the device planner plans for: its works
(entries + 2 per program at most) are counted in 15 bits."""
MIN_BLOCK = 128
"""Smallest lane count of a kernel variant (a variant per power of two above)."""
MIN_PROGRAM_LANES = 128
FUSED_MAX_ENTRIES = 256
"""Batches of at most this many entries are planned by the walk kernel alone (one launch);
larger ones by the setup kernel's grid first (the setup and the fill spread over programs)."""
SETUP_BLOCK = 128
"""Entries per program of the setup kernel (one per thread of its 4 warps)."""
FINISH_BLOCK = 128
"""Entries per program of the finish kernel (kernels/planner_finish.py)."""
COUNTS = ("num_works", "num_partials", "num_tiles", "status", "sum_blocks", "payload", "rounds")
"""The counts a plan writes; ``rounds``: the walk's rounds (0 when the chain found every snap)."""
CHAIN_MAX_TILES_PER_PROGRAM = 2
"""The walk tries the chain of snaps (kernels/planner_chain.py) when the entries number at
most this many per program: tiles of about a payload or more, where programs snap often."""
CHAIN_MIN_ENTRIES = 8
"""... and at least this many: the rounds are at most one per entry plus one, and on the
H200 a round took about 0.4 µs against about 1.7 µs more for the chain."""
CHAIN_WINDOW = 4
"""Tiles after a boundary in which the chain looks for its next snap."""


@dataclass
class DevicePlanBuffers:
    """Every buffer one plan is written into; allocate once to keep addresses fixed."""

    work_indptr: torch.Tensor
    work_info_set: torch.Tensor
    reduce_indptr: torch.Tensor
    reduce_final_map: torch.Tensor
    reduce_partial_map: torch.Tensor
    counts: torch.Tensor
    scratch: torch.Tensor
    marks: torch.Tensor
    chain: torch.Tensor

    @property
    def entries(self) -> int:
        """The (virtual batch x qo tile) entries these buffers plan."""
        return self.scratch.numel() // planner_setup.SCRATCH_FIELDS.value

    @classmethod
    def allocate(cls, shape: PlanShape, entries: int, device: torch.device) -> DevicePlanBuffers:
        """Buffers of `shape.sizes` (contents undefined until a plan is written)."""
        made = {
            name: torch.empty(size, dtype=torch.int32, device=device)
            for name, (size, _) in zip(PLAN_BUFFERS, shape.sizes[1:], strict=True)
        }
        return cls(
            **made,
            counts=torch.zeros(len(COUNTS), dtype=torch.int32, device=device),
            scratch=torch.empty(
                max(entries, 1) * planner_setup.SCRATCH_FIELDS.value,
                dtype=torch.int32,
                device=device,
            ),
            marks=torch.empty(2 * _kblock(shape), dtype=torch.int32, device=device),
            chain=torch.empty(
                max(entries, 1) * planner_chain.CHAIN_FIELDS.value,
                dtype=torch.int32,
                device=device,
            ),
        )


class DeviceWorkPlan(WorkPlan):
    """A `WorkPlan` the device planner is writing: its counts are read back on first use.

    `for_launch` gives the kernels a plan without reading anything back (counts set to
    the buffer capacities, which the decode and reduce kernels accept).
    """

    def __init__(self, buffers: DevicePlanBuffers, call: dict[str, Any], shape: PlanShape):
        for name in PLAN_BUFFERS:
            setattr(self, name, getattr(buffers, name))
        self.fold_ratio = shape.fold_ratio
        self.heads_per_work = shape.heads_per_work
        self.max_seqlen_qo = call["max_seqlen_qo"]
        self.counts = buffers.counts
        self._call = call
        self._shape = shape
        self._host: dict[str, int] | None = None

    def host_counts(self) -> dict[str, int]:
        """The plan's counts (one device-to-host copy, once); `PlanError` if it is invalid."""
        if self._host is None:
            values = dict(zip(COUNTS, self.counts.tolist(), strict=True))
            if values["status"]:
                plan_persistent_decode(**self._call)  # raises the reference planner's error
                problems = [
                    t for bit, t in triton_planner.STATUS_BITS.items() if values["status"] & bit
                ]
                raise PlanError(
                    f"kv_indptr: {DEVICE_LIMIT} ({', '.join(problems)}); the sum of tile "
                    f"costs must stay below 2**28"
                )
            self._host = values
        return self._host

    @property
    def num_works(self) -> int:  # type: ignore[override]
        return self.host_counts()["num_works"]

    @property
    def num_partials(self) -> int:  # type: ignore[override]
        return self.host_counts()["num_partials"]

    @property
    def num_tiles(self) -> int:  # type: ignore[override]
        return self.host_counts()["num_tiles"]

    @property
    def params(self) -> dict[str, object]:  # type: ignore[override]
        counts = self.host_counts()
        call = {
            k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in self._call.items()
        }
        params = plan_params(
            call,
            self._shape,
            num_tiles=counts["num_tiles"],
            payload=counts["payload"],
            sum_blocks=counts["sum_blocks"],
        )
        params["planner"] = f"triton device planner, profile {self._shape.profile.name}"
        return params

    def for_launch(self) -> WorkPlan:
        """The same buffers as a plain `WorkPlan`, counts at capacity (no host sync)."""
        return WorkPlan(
            **{name: getattr(self, name) for name in PLAN_BUFFERS},
            num_works=self.work_info_set.shape[0],
            num_partials=self.reduce_partial_map.shape[0],
            num_tiles=self.reduce_indptr.shape[0] - 1,
            fold_ratio=self.fold_ratio,
            heads_per_work=self.heads_per_work,
            max_seqlen_qo=self.max_seqlen_qo,
        )


def for_launch(plan: WorkPlan) -> WorkPlan:
    """What a decode kernel should be given: a device plan without a host sync."""
    return plan.for_launch() if isinstance(plan, DeviceWorkPlan) else plan


def _kblock(shape: PlanShape) -> int:
    """Lanes of the per-program vectors: programs + 1 rounded up to a power of two, at
    least `MIN_PROGRAM_LANES` (256 on a device of 132 SMs)."""
    return max(MIN_PROGRAM_LANES, triton.next_power_of_2(shape.num_cu + 1))


def _tiling(shape: PlanShape) -> int:
    """The kernel's qo tiling: 0 one tile, 1 one per q token, 2 by packed rows."""
    if not shape.qo_splits:
        return 0
    return 1 if 2 * shape.heads_per_work > shape.packed_rows else 2


def _num_warps(block: int) -> int:
    """About 40 registers per entry and thread: 4 entries a thread up to 16 warps."""
    return 4 if block <= 512 else 8 if block <= 1024 else 16


def plan_on_device(
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    *,
    buffers: DevicePlanBuffers | None = None,
    num_warps: int | None = None,
    fused: bool | None = None,
    pdl: bool | None = None,
    chain: bool | None = None,
    **call: Any,
) -> DeviceWorkPlan:
    """Plan on the device of `kv_indptr` (arguments as `plan_persistent_decode`'s).

    `buffers` (from `plan_buffers`) are reused when given, else allocated. Nothing is read
    back: errors of the batch's values surface when the plan's counts are first read.
    `fused` picks one launch (the walk kernel does the setup and the fill itself) or three
    (the setup grid, the walk, the finish grid); by default one up to `FUSED_MAX_ENTRIES`
    entries.
    `num_warps` overrides the walk kernel's; `pdl` (three launches, Hopper or later; by
    default where the device takes it) launches the walk kernel as the setup kernel's
    programmatic dependent and the finish kernel as the walk's. `chain` forces the
    chain of snaps on or off (by default on from `CHAIN_MIN_ENTRIES` entries up to
    `CHAIN_MAX_TILES_PER_PROGRAM` per program); either way the plan is the same.
    """
    q_cls, kv_cls = check_call_scalars(call)
    tensors = dict(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_last_page_lens=kv_last_page_lens)
    for name, tensor in tensors.items():
        check_index_tensor(tensor, argument=name)
    batch = check_lengths(qo_indptr.numel(), kv_indptr.numel(), kv_last_page_lens.numel())
    shape = derive_shape(call, batch_size=batch, q_cls=q_cls, kv_cls=kv_cls)
    ntmax, entries = _entries(shape, batch, call["max_seqlen_qo"])
    device = kv_indptr.device
    if buffers is None:
        buffers = DevicePlanBuffers.allocate(shape, entries, device)
    qo, kv, last = (t.to(device=device, dtype=torch.int32).contiguous() for t in tensors.values())
    max_work, tile_cnt, pm_len = (shape.sizes[i][0][0] for i in (2, 4, 5))
    block = max(MIN_BLOCK, triton.next_power_of_2(entries))
    if fused is None:
        fused = entries <= FUSED_MAX_ENTRIES
    if chain is None:
        chain = CHAIN_MIN_ENTRIES <= entries <= CHAIN_MAX_TILES_PER_PROGRAM * shape.num_cu
    kblock = _kblock(shape)
    pdl = (programmatic_launch(device) if pdl is None else pdl) and not fused
    batch_scalars = (
        batch,
        shape.fold_ratio,
        call["uni_seqlen_qo"],
        shape.heads_per_work,
        shape.packed_rows,
        call["max_seqlen_qo"],
    )
    tile_scalars = (
        call["kv_granularity"].bit_length() - 1,
        call["page_size"],
        int(bool(call["causal"])),
        _tiling(shape),
        int(shape.fold_ratio > 1 and shape.profile.folded_batch_tail == "aiter"),
    )
    if not fused:
        fill = (max_work * 8, tile_cnt * 2, pm_len)
        planner_setup.setup_kernel[(_setup_programs(entries, sum(fill)),)](
            qo,
            kv,
            last,
            buffers.work_info_set,
            buffers.reduce_final_map,
            buffers.reduce_partial_map,
            buffers.scratch,
            batch,
            entries,  # the scratch's stride
            *batch_scalars[1:],
            shape.overhead,
            ntmax,
            *tile_scalars,
            *fill,
            PAGE1=call["page_size"] == 1,
            BLOCK=SETUP_BLOCK,
            PDL=pdl,
            num_warps=4,
        )
    written = (  # what the walk and finish kernels take first, in this order
        *(getattr(buffers, name) for name in PLAN_BUFFERS),
        buffers.counts,
        buffers.scratch,
    )
    triton_planner.plan_kernel[(1,)](
        qo,
        kv,
        last,
        *written,
        buffers.marks,
        buffers.chain,
        *batch_scalars,
        shape.num_cu,
        shape.num_splits,
        shape.overhead,
        ntmax,
        max_work,
        tile_cnt,
        pm_len,
        *tile_scalars,
        entries,
        PAGE1=call["page_size"] == 1,
        FUSED=fused,
        BLOCK=block,
        KBLOCK=kblock,
        FILL_BLOCK=1024,
        FINISH_BLOCK=FINISH_BLOCK,
        PDL=pdl,
        CHAIN=chain,
        WINDOW=CHAIN_WINDOW,
        LEVELS=kblock.bit_length() - 1,
        num_warps=num_warps or _num_warps(block),
        launch_pdl=pdl,
    )
    if not fused:
        planner_finish.finish_kernel[(triton.cdiv(entries, FINISH_BLOCK),)](
            *written,
            buffers.marks[kblock:],  # the programs' starts, left by the walk
            entries,
            shape.num_cu,
            shape.num_splits,
            tile_scalars[0],
            call["page_size"],
            max_work,
            tile_cnt,
            pm_len,
            PAGE1=call["page_size"] == 1,
            BLOCK=FINISH_BLOCK,
            NBLOCKS=triton.next_power_of_2(triton.cdiv(entries, FINISH_BLOCK)),
            PDL=pdl,
            num_warps=4,
            launch_pdl=pdl,
        )
    return DeviceWorkPlan(buffers, {**tensors, **call}, shape)


@functools.cache
def programmatic_launch(device: torch.device) -> bool:
    """Whether `device` takes programmatic dependent launches (CUDA, Hopper or later)."""
    if device.type != "cuda" or torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def _setup_programs(entries: int, fill: int) -> int:
    """Programs of the setup kernel: one per `SETUP_BLOCK` entries, or per two blocks of the
    fill when that takes more."""
    return max(triton.cdiv(entries, SETUP_BLOCK), triton.cdiv(fill, 2 * SETUP_BLOCK))


def _entries(shape: PlanShape, batch: int, max_seqlen_qo: int) -> tuple[int, int]:
    """(qo tiles per virtual batch at most, entries) of a batch; `PlanError` when too many."""
    ntmax = shape.num_qo_tiles(max_seqlen_qo)
    entries = batch * shape.fold_ratio * ntmax
    if shape.num_cu > MAX_PROGRAMS:
        raise PlanError(
            f"num_cus: {shape.num_cu} programs: {DEVICE_LIMIT} (at most {MAX_PROGRAMS})"
        )
    if entries > MAX_ENTRIES:
        raise PlanError(
            f"kv_indptr: {batch} batches x {shape.fold_ratio} head groups x {ntmax} qo tiles "
            f"= {entries} entries: {DEVICE_LIMIT} (at most {MAX_ENTRIES} entries)"
        )
    return ntmax, entries


def plan_buffers(
    qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_last_page_lens: torch.Tensor, **call: Any
) -> DevicePlanBuffers:
    """Buffers for every batch of this size and these scalars (for `plan_on_device`)."""
    q_cls, kv_cls = check_call_scalars(call)
    batch = check_lengths(qo_indptr.numel(), kv_indptr.numel(), kv_last_page_lens.numel())
    shape = derive_shape(call, batch_size=batch, q_cls=q_cls, kv_cls=kv_cls)
    return DevicePlanBuffers.allocate(
        shape, _entries(shape, batch, call["max_seqlen_qo"])[1], kv_indptr.device
    )


class DevicePlanner:
    """A builder's planner: the reference planner's call, answered on `device`.

    Inputs are copied to the device; the plan's counts are read back at once (so that a
    bad batch raises while building, as with the reference planner). Batches beyond the
    device planner's limits (`MAX_ENTRIES`, the cost bound) are planned by the reference
    planner.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @takes_planner_call
    def __call__(self, *inputs: torch.Tensor, **call: Any) -> WorkPlan:
        """Plan one batch (arguments as `plan_persistent_decode`'s)."""
        try:
            moved = (
                check_index_tensor(t, argument=n).to(self.device)
                for t, n in zip(
                    inputs, ("qo_indptr", "kv_indptr", "kv_last_page_lens"), strict=True
                )
            )
            plan = plan_on_device(*moved, **call)
            plan.host_counts()
        except PlanError as error:
            if DEVICE_LIMIT not in str(error):
                raise
            return plan_persistent_decode(*inputs, **call).to(self.device)
        return plan


def builder_planner(device: torch.device, host: Callable[..., WorkPlan]) -> Callable[..., Any]:
    """The planner of a Triton builder on `device` (see `PLANNER_ENV`)."""
    mode = os.environ.get(PLANNER_ENV, "device")
    if mode not in ("device", "host"):
        raise ValueError(f"{PLANNER_ENV}: expected 'device' or 'host', found {mode!r}")
    if mode == "device" and device.type == "cuda":
        return DevicePlanner(device)
    return host


def planned_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    buffers: DevicePlanBuffers,
    decode: dict[str, Any],
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    **call: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step, plan + decode + reduce, with no host sync (capturable).

    `call` holds the planner's keywords, `decode` the decode's own (``page_size``,
    ``sm_scale``, ...); every tensor must already be on the device.
    """
    from kernels.triton_mla import persistent_mla_decode

    plan = plan_on_device(qo_indptr, kv_indptr, kv_last_page_lens, buffers=buffers, **call)
    return persistent_mla_decode(
        q,
        kv_cache,
        plan.for_launch(),
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        kv_last_page_lens=kv_last_page_lens,
        qo_indptr=qo_indptr,
        page_size=call["page_size"],
        causal=bool(call["causal"]),
        out=out,
        lse=lse,
        **decode,
    )
