"""The rules of `validate` on the record's fields, shapes and lengths (V1-V20).

Each check raises `MetadataError` naming the field (with the request or index at fault
where there is one), what was expected and what was found. `validator.RULES` lists them
with their codes; the paging rules (V21-V26) live in `conformance.metadata.paging`.
"""

from __future__ import annotations

from collections import Counter

import torch

from conformance.errors import MetadataError
from conformance.metadata.checked import Checked, check_rows, same_device
from conformance.metadata.paging import PAD_SLOT_ID
from conformance.metadata.record import REQUIRED_FIELDS

# Every tensor field: (dtype, where it lives, shape rule). "device" is the record's device,
# "cpu" the host. Shape rules: "reqs+1" [num_reqs + 1], "reqs" [num_reqs], "tokens"
# [num_actual_tokens], "slots" 1-D of >= num_actual_tokens, "table" 2-D of num_reqs rows.
TENSOR_FIELDS: dict[str, tuple[torch.dtype, str, str]] = {
    "query_start_loc": (torch.int32, "device", "reqs+1"),
    "query_start_loc_cpu": (torch.int32, "cpu", "reqs+1"),
    "seq_lens": (torch.int32, "device", "reqs"),
    "block_table_tensor": (torch.int32, "device", "table"),
    "slot_mapping": (torch.int64, "device", "slots"),
    "seq_lens_cpu_upper_bound": (torch.int32, "cpu", "reqs"),
    "dcp_local_seq_lens": (torch.int32, "device", "reqs"),
    "dcp_local_seq_lens_cpu": (torch.int32, "cpu", "reqs"),
    "positions": (torch.int64, "device", "tokens"),
    "is_prefilling": (torch.bool, "device", "reqs"),
    "_seq_lens_cpu": (torch.int32, "cpu", "reqs"),
}
INT_FIELDS = ("num_reqs", "num_actual_tokens", "max_query_len", "max_seq_len")
QSL, QSL_CPU, UB = "query_start_loc", "query_start_loc_cpu", "seq_lens_cpu_upper_bound"


def _tensors(c: Checked, *rules: str) -> list[tuple[str, torch.Tensor, torch.dtype, str, str]]:
    """(name, value, dtype, where, shape rule) of every set tensor field, or of those whose
    shape rule is one of `rules`."""
    return [
        (name, value, dtype, where, rule)
        for name, (dtype, where, rule) in TENSOR_FIELDS.items()
        if (value := getattr(c.cam, name)) is not None and (not rules or rule in rules)
    ]


# -- fields and types ---------------------------------------------------------------------
def check_required(c: Checked) -> None:
    for name in REQUIRED_FIELDS:
        if getattr(c.cam, name, None) is None:
            raise MetadataError(name, "a value (required field)", None)


def check_scalars(c: Checked) -> None:
    for name in INT_FIELDS:
        value = getattr(c.cam, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise MetadataError(name, "a non-negative int", repr(value))
    if not isinstance(c.cam.causal, bool):
        raise MetadataError("causal", "a bool", type(c.cam.causal).__name__)


def check_tensor_types(c: Checked) -> None:
    for name in TENSOR_FIELDS:
        value = getattr(c.cam, name)
        if value is not None and not isinstance(value, torch.Tensor):
            raise MetadataError(name, "a torch.Tensor", type(value).__name__)


def check_dtypes(c: Checked) -> None:
    for name, t, dtype, _, _ in _tensors(c):
        if t.dtype != dtype:
            raise MetadataError(name, f"dtype {dtype}", t.dtype)


def check_devices(c: Checked) -> None:
    for name, t, _, where, _ in _tensors(c):
        on = torch.device("cpu") if where == "cpu" else c.device
        if not same_device(t.device, on):
            raise MetadataError(name, f"device {on}", t.device)


# -- shapes and counts --------------------------------------------------------------------
def check_num_reqs(c: Checked) -> None:
    """A `num_reqs` that three of the four per-request counts contradict is named itself."""
    counts = []
    for name in (QSL, QSL_CPU, "seq_lens", "block_table_tensor"):
        t = getattr(c.cam, name)
        if t.dim() >= 1:
            counts.append(t.shape[0] - (1 if name.startswith(QSL) else 0))
    common, votes = Counter(counts).most_common(1)[0] if counts else (c.cam.num_reqs, 0)
    if votes >= 3 and common != c.cam.num_reqs:
        raise MetadataError(
            "num_reqs",
            f"{common} (the request count of query_start_loc, seq_lens, block_table_tensor)",
            c.cam.num_reqs,
        )


def check_request_shapes(c: Checked) -> None:
    n = c.cam.num_reqs
    for name, t, _, _, rule in _tensors(c, "reqs+1", "reqs", "table"):
        if rule == "table":
            if t.dim() != 2 or t.shape[0] != n:
                raise MetadataError(name, f"shape ({n}, max_blocks)", tuple(t.shape))
            continue
        shape = (n + 1,) if rule == "reqs+1" else (n,)
        if tuple(t.shape) != shape:
            raise MetadataError(name, f"shape {shape}", tuple(t.shape))


def check_token_count(c: Checked) -> None:
    first, last = int(c.cam.query_start_loc_cpu[0]), int(c.cam.query_start_loc_cpu[-1])
    if first != 0:
        raise MetadataError(f"{QSL_CPU}[0]", "0", first)
    if last != c.cam.num_actual_tokens:
        raise MetadataError(
            "num_actual_tokens", f"{QSL_CPU}[num_reqs] = {last}", c.cam.num_actual_tokens
        )


def check_token_shapes(c: Checked) -> None:
    tokens = c.cam.num_actual_tokens
    for name, t, _, _, rule in _tensors(c, "slots", "tokens"):
        if rule == "slots" and (t.dim() != 1 or t.shape[0] < tokens):
            raise MetadataError(name, f"1-D with >= {tokens} entries", tuple(t.shape))
        if rule == "tokens" and tuple(t.shape) != (tokens,):
            raise MetadataError(name, f"shape {(tokens,)}", tuple(t.shape))


# -- lengths ------------------------------------------------------------------------------
def check_offsets_increase(c: Checked) -> None:
    offsets = c.offsets
    bad = (offsets[1:] < offsets[:-1]).nonzero().flatten()
    if bad.numel():
        row = int(bad[0])
        raise MetadataError(
            f"{QSL_CPU}[{row}]",
            "non-decreasing offsets",
            f"{int(offsets[row])} -> {int(offsets[row + 1])} (request {row} has "
            f"{int(offsets[row + 1] - offsets[row])} new tokens)",
        )


def check_device_offsets(c: Checked) -> None:
    device_qsl = c.cam.query_start_loc.cpu().to(torch.int64)
    check_rows(device_qsl == c.offsets, QSL, "== query_start_loc_cpu", device_qsl, c.offsets)


def check_max_query_len(c: Checked) -> None:
    max_q = int(c.query_lens.max()) if c.cam.num_reqs else 0
    if c.cam.max_query_len != max_q:
        raise MetadataError("max_query_len", f"the longest query ({max_q})", c.cam.max_query_len)


def check_seq_covers_query(c: Checked) -> None:
    check_rows(c.seq >= c.query_lens, "seq_lens", ">= query length", c.seq, c.query_lens)


def check_max_seq_len(c: Checked) -> None:
    max_s = int(c.seq.max()) if c.cam.num_reqs else 0
    if c.cam.max_seq_len < max_s:
        raise MetadataError("max_seq_len", f">= longest sequence ({max_s})", c.cam.max_seq_len)


def check_upper_bound(c: Checked) -> None:
    ub = c.cam.seq_lens_cpu_upper_bound
    if ub is None:
        if bool(c.is_prefill.any()):
            row = int(c.is_prefill.nonzero()[0])
            raise MetadataError(UB, f"a CPU tensor (required: request {row} is a prefill)", None)
        return
    ub64 = ub.to(torch.int64)
    check_rows(ub64 >= c.seq, UB, ">= seq_lens", ub64, c.seq)
    exact = (ub64 == c.seq) | ~c.is_prefill
    check_rows(exact, UB, "== seq_lens on a prefill row", ub64, c.seq)


def check_decodes_first(c: Checked) -> None:
    seen_prefill = False
    for row, q in enumerate(c.query_lens.tolist()):
        if q > c.decode_threshold:
            seen_prefill = True
        elif seen_prefill and q > 0:
            raise MetadataError(
                f"{QSL_CPU} (request {row})",
                "decode requests ordered before prefills",
                f"a decode of {q} tokens after a prefill",
            )


def check_dcp_lens(c: Checked) -> None:
    seq, local = c.seq, None
    if c.cam.dcp_local_seq_lens is not None:
        local = c.cam.dcp_local_seq_lens.cpu().to(torch.int64)
        check_rows(local <= seq, "dcp_local_seq_lens", "<= seq_lens", local, seq)
    if c.cam.dcp_local_seq_lens_cpu is not None:
        local_cpu = c.cam.dcp_local_seq_lens_cpu.to(torch.int64)
        name = "dcp_local_seq_lens_cpu"
        if local is None:
            check_rows(local_cpu <= seq, name, "<= seq_lens", local_cpu, seq)
        else:
            check_rows(local_cpu == local, name, "== dcp_local_seq_lens", local_cpu, local)


def check_legacy_seq_lens(c: Checked) -> None:
    if c.cam._seq_lens_cpu is not None:
        legacy = c.cam._seq_lens_cpu.to(torch.int64)
        check_rows(legacy == c.seq, "_seq_lens_cpu", "== seq_lens", legacy, c.seq)


def check_positions(c: Checked) -> None:
    if c.cam.positions is None:
        return
    positions = c.cam.positions.cpu()
    for r, (start, end) in enumerate(c.ranges()):
        expected = torch.arange(int(c.seq[r]) - (end - start), int(c.seq[r]))
        if not torch.equal(positions[start:end], expected):
            raise MetadataError(
                f"positions[{start}:{end}] (request {r})",
                str(expected.tolist()),
                positions[start:end].tolist(),
            )


def check_padding_slots(c: Checked) -> None:
    """Slots past `num_actual_tokens` are padding and must be `PAD_SLOT_ID`."""
    tail = c.cam.slot_mapping[c.cam.num_actual_tokens :].cpu()
    bad = (tail != PAD_SLOT_ID).nonzero().flatten()
    if bad.numel():
        index = c.cam.num_actual_tokens + int(bad[0])
        raise MetadataError(
            f"slot_mapping[{index}]", f"{PAD_SLOT_ID} on a padding token", int(tail[int(bad[0])])
        )
