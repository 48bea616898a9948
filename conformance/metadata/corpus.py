"""A corpus of malformed `CommonAttentionMetadata` records, one corruption each.

Each entry of `CORRUPTIONS` takes the valid record `make_record()` (from the factory, every
optional field set) and corrupts one thing; a validator or builder must reject it with a
`MetadataError` naming the field, and the request or index where the entry names one
(`names_field`). `VALID` holds edge cases every path must accept. Family A runs both through
each backend's builder; the selftests also run them through `validate`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from conformance.errors import MetadataError
from conformance.metadata import batch
from conformance.metadata.record import REQUIRED_FIELDS, CommonAttentionMetadata
from conformance.metadata.validator import TENSOR_FIELDS

BLOCK_SIZE = 16
NUM_BLOCKS = 64  # the base record holds block 63: the bound on block ids is tight
# Two decodes, two prefills with context, one padding row; requests 0 and 1 decode.
BASE = batch.BatchSpec((40, 50, 60, 70, 0), (1, 1, 6, 8, 0), "corpus")
PAD_TAIL = 2  # padding tokens at the end of slot_mapping

Cam = CommonAttentionMetadata
Corrupt = Callable[[Cam], Cam]


def make_record(
    spec: batch.BatchSpec = BASE,
    table: torch.Tensor | None = None,
    device: torch.device | str = "cpu",
) -> Cam:
    """The factory's record of `spec` with every optional field set, slots over `table`."""
    cam = batch.make_cam(spec, block_size=BLOCK_SIZE, num_blocks=NUM_BLOCKS, device=device)
    if table is not None:
        cam = cam.replace(block_table_tensor=table.to(device))
    slots, _ = batch.slots_and_positions(spec, cam.block_table_tensor.cpu(), BLOCK_SIZE)
    tail = torch.full((PAD_TAIL,), -1, dtype=torch.int64)
    half = (cam.seq_lens // 2).to(torch.int32)
    return cam.replace(
        slot_mapping=torch.cat([slots, tail]).to(device),
        dcp_local_seq_lens=half,
        dcp_local_seq_lens_cpu=half.to("cpu", copy=True),
        _seq_lens_cpu=cam.seq_lens.to("cpu", copy=True),
    )


def _set(t: torch.Tensor, index: int | tuple[int, int], value: float) -> torch.Tensor:
    out = t.clone()
    out[index] = value
    return out


def _table(c: Cam, index: tuple[int, int], source: tuple[int, int] | int) -> Cam:
    """`c` (with matching slots) whose table entry `index` is `source` (an entry or an id)."""
    t = c.block_table_tensor
    value = int(t[source]) if isinstance(source, tuple) else source
    return make_record(table=_set(t, index, value), device=t.device)


def _wrong_dtype(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.uint8) if t.dtype == torch.bool else t.to(torch.float32)


def _wrong_shape(t: torch.Tensor) -> torch.Tensor:
    """Three entries short (past the padding tail of `slot_mapping`), or a row short."""
    return t[:-3] if t.dim() == 1 else t[1:]


def _per_tensor() -> dict[str, tuple[str, Corrupt]]:
    """Non-tensor, wrong dtype (equal values), wrong device and wrong shape of every field."""
    table: dict[str, tuple[str, Corrupt]] = {}
    for name in TENSOR_FIELDS:
        for kind, change in (
            ("list", lambda t: t.tolist()),
            ("dtype", _wrong_dtype),
            ("device", lambda t: t.to("meta")),
            ("shape", _wrong_shape),
        ):
            table[f"{name}-{kind}"] = (
                name,
                lambda c, n=name, f=change: c.replace(**{n: f(getattr(c, n))}),
            )
    return table


def _with(**changes: object) -> Corrupt:
    """Replace whole fields."""
    return lambda c: c.replace(**changes)


def _at(name: str, index: int | tuple[int, int], value: float, *also: str) -> Corrupt:
    """Set entry `index` of tensor field `name` (and of each field in `also`) to `value`."""
    return lambda c: c.replace(**{n: _set(getattr(c, n), index, value) for n in (name, *also)})


def _shift_slot(index: int, to: int | None = None, by: int = 0) -> Corrupt:
    """Slot `index` moved to slot `to` of the same record (or by `by`)."""

    def corrupt(c: Cam) -> Cam:
        target = int(c.slot_mapping[index if to is None else to]) + by
        return c.replace(slot_mapping=_set(c.slot_mapping, index, target))

    return corrupt


def _shifted_offsets(c: Cam) -> Cam:
    return c.replace(
        query_start_loc=c.query_start_loc + 1, query_start_loc_cpu=c.query_start_loc_cpu + 1
    )


def _unordered(c: Cam) -> Cam:
    spec = batch.BatchSpec((64, 10), (64, 1), "prefill-first")
    return make_record(spec, device=c.seq_lens.device)


QSL, UB, TABLE = "query_start_loc", "seq_lens_cpu_upper_bound", "block_table_tensor"
TAIL = 16 + PAD_TAIL - 1  # the last padding slot of the base record

# name -> (the field the error must name, exactly where an index is given; the corruption)
CORRUPTIONS: dict[str, tuple[str, Corrupt]] = {
    **_per_tensor(),
    **{f"{f}-none": (f, _with(**{f: None})) for f in REQUIRED_FIELDS},
    "num-reqs-plus-one": ("num_reqs", _with(num_reqs=6)),
    "num-reqs-minus-one": ("num_reqs", _with(num_reqs=4)),
    "num-reqs-negative": ("num_reqs", _with(num_reqs=-1)),
    "num-reqs-bool": ("num_reqs", _with(num_reqs=True)),
    "num-actual-tokens": ("num_actual_tokens", _with(num_actual_tokens=15)),
    "num-actual-tokens-float": ("num_actual_tokens", _with(num_actual_tokens=16.0)),
    "max-query-len-above": ("max_query_len", _with(max_query_len=9)),
    "max-query-len-below": ("max_query_len", _with(max_query_len=7)),
    "max-seq-len-below": ("max_seq_len", _with(max_seq_len=69)),
    "max-seq-len-str": ("max_seq_len", _with(max_seq_len="70")),
    "causal-int": ("causal", _with(causal=1)),
    "qsl-not-zero-based": ("query_start_loc_cpu[0]", _shifted_offsets),
    "qsl-decreasing": ("query_start_loc_cpu[1]", _at(QSL, 2, 0, "query_start_loc_cpu")),
    "qsl-device-copy-differs": ("query_start_loc[1]", _at(QSL, 1, 0)),
    "seq-below-query": ("seq_lens[3]", _at("seq_lens", 3, 2)),
    "upper-bound-below-seq": (f"{UB}[0]", _at(UB, 0, 39)),
    "upper-bound-inexact-on-prefill": (f"{UB}[3]", _at(UB, 3, 100)),
    "upper-bound-missing": (UB, _with(seq_lens_cpu_upper_bound=None)),
    "decode-after-prefill": ("query_start_loc_cpu (request 1)", _unordered),
    "dcp-longer-than-seq": ("dcp_local_seq_lens[0]", _at("dcp_local_seq_lens", 0, 41)),
    "dcp-cpu-copy-differs": ("dcp_local_seq_lens_cpu[2]", _at("dcp_local_seq_lens_cpu", 2, 1)),
    "legacy-seq-lens-differ": ("_seq_lens_cpu[1]", _at("_seq_lens_cpu", 1, 51)),
    "positions-wrong": ("positions[0:1] (request 0)", _at("positions", 0, 7)),
    "table-too-narrow": (f"{TABLE}[3]", lambda c: c.replace(**{TABLE: getattr(c, TABLE)[:, :4]})),
    "table-wrong-rows": (TABLE, lambda c: c.replace(**{TABLE: getattr(c, TABLE)[:4]})),
    "block-id-past-cache": (f"{TABLE}[0, 0]", lambda c: _table(c, (0, 0), NUM_BLOCKS)),
    "block-id-negative": (f"{TABLE}[2, 1]", lambda c: _table(c, (2, 1), -3)),
    "null-block-as-context": (f"{TABLE}[1, 0]", lambda c: _table(c, (1, 0), batch.NULL_BLOCK)),
    "block-twice-in-a-request": (f"{TABLE}[2, 1]", lambda c: _table(c, (2, 1), (2, 0))),
    # request 1 writes its new token into request 0's logical block 2 (written) or 0 (read)
    "write-into-another-requests-write-block": (
        f"{TABLE}[0, 2]",
        lambda c: _table(c, (1, 3), (0, 2)),
    ),
    "write-into-another-requests-prefix": (f"{TABLE}[1, 3]", lambda c: _table(c, (1, 3), (0, 0))),
    "slot-in-another-requests-block": ("slot_mapping[1]", _shift_slot(1, to=0)),
    "slot-past-cache": ("slot_mapping[0]", _at("slot_mapping", 0, NUM_BLOCKS * BLOCK_SIZE + 7)),
    "slot-off-by-one": ("slot_mapping[4]", _shift_slot(4, by=1)),
    "two-tokens-one-slot": ("slot_mapping[3]", _shift_slot(3, to=2)),
    "padding-tail-not-pad-slot": (f"slot_mapping[{TAIL}]", _at("slot_mapping", TAIL, 3)),
}


def _shared_prefix(c: Cam) -> Cam:
    """Requests 0 and 1 read the same first two blocks (prefix caching); each writes its own."""
    t = c.block_table_tensor.clone()
    t[1, :2] = t[0, :2]
    return make_record(table=t, device=t.device)


def _stale_entries(c: Cam) -> Cam:
    """Entries past a request's live blocks are never read: stale ids there are fine."""
    stale = _set(c.block_table_tensor, (0, 4), NUM_BLOCKS + 5)
    return make_record(table=stale, device=stale.device)


def _other(c: Cam, seq_lens: tuple[int, ...], query_lens: tuple[int, ...]) -> Cam:
    spec = batch.BatchSpec(seq_lens, query_lens, "edge")
    return make_record(spec, device=c.seq_lens.device)


VALID: dict[str, Corrupt] = {
    "base-with-padding-row-and-tail": lambda c: c,
    "empty-batch": lambda c: _other(c, (), ()),
    "all-padding-rows": lambda c: _other(c, (0, 0), (0, 0)),
    "kv-len-one": lambda c: _other(c, (1, 1, 9), (1, 1, 9)),
    "full-last-page": lambda c: _other(c, (32, 16, 48), (1, 1, 16)),
    "max-seq-len-over-estimate": lambda c: c.replace(max_seq_len=4096),
    "upper-bound-over-estimate-on-decode": lambda c: c.replace(
        seq_lens_cpu_upper_bound=_set(c.seq_lens_cpu_upper_bound, 1, 53)
    ),
    "shared-read-only-prefix": _shared_prefix,
    "stale-table-entries": _stale_entries,
    "optional-fields-absent": lambda c: c.replace(
        dcp_local_seq_lens=None,
        dcp_local_seq_lens_cpu=None,
        _seq_lens_cpu=None,
        positions=None,
        is_prefilling=None,
    ),
    "dcp-cpu-copy-alone": lambda c: c.replace(dcp_local_seq_lens=None),
}


def names_field(error: MetadataError, want: str) -> bool:
    """`error` names the field of `want`, and exactly `want` where it has an index."""
    base = want.split("[")[0].split(" ")[0]
    if error.field.split("[")[0].split(" ")[0] != base:
        return False
    return want == base or error.field == want
