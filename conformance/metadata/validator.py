"""`validate(cam)`: every invariant of `CommonAttentionMetadata` (vllm_mla_interface.md §1.3).

A violation raises `MetadataError` naming the field (with the request or index where one
is at fault), what was expected and what was found. The rules, one line each, are listed
in docs/validator.md. The paging rules (block table, slots, block ownership) live in
`conformance.metadata.paging`.
"""

from __future__ import annotations

from collections import Counter

import torch

from conformance.errors import MetadataError
from conformance.metadata.paging import (
    PAD_SLOT_ID,
    check_padding_slots,
    check_paging,
    check_paging_facts,
)
from conformance.metadata.record import REQUIRED_FIELDS, CommonAttentionMetadata

__all__ = ["PAD_SLOT_ID", "TENSOR_FIELDS", "validate"]

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
QSL = "query_start_loc"
_INT_FIELDS = ("num_reqs", "num_actual_tokens", "max_query_len", "max_seq_len")
# Device-side required tensors; without a `device` argument their majority is the record's.
_DEVICE_ANCHORS = ("query_start_loc", "seq_lens", "block_table_tensor", "slot_mapping")


def validate(
    cam: CommonAttentionMetadata,
    *,
    decode_threshold: int = 1,
    block_size: int | None = None,
    num_blocks: int | None = None,
    device: torch.device | str | None = None,
) -> None:
    """Check every invariant of `cam`; raise `MetadataError` on the first violation.

    Rows with a query longer than `decode_threshold` are prefills. `device` is where the
    device-side tensors must live (default: where most of the required ones are).

    Without `block_size` the paging rules cannot run: the block table's width, the range
    of its live block ids, the reserved null block, the agreement of `slot_mapping` with
    the table and the ownership of the blocks new tokens are written to all go
    unchecked. Without `num_blocks` live block ids are bounded below only.
    """
    check_paging_facts(block_size, num_blocks)
    _check_required(cam)
    expected_device = _record_device(cam, device)
    for name, (dtype, where, _) in TENSOR_FIELDS.items():
        value = getattr(cam, name)
        if value is not None:
            on = torch.device("cpu") if where == "cpu" else expected_device
            _check_tensor(value, name, dtype, on)
    _check_num_reqs(cam)
    for name, (_, _, rule) in TENSOR_FIELDS.items():
        value = getattr(cam, name)
        if value is not None:
            _check_shape(value, name, rule, cam)
        if name == "query_start_loc_cpu":  # the token count before the per-token shapes
            _check_token_count(cam)
    qsl, seq = _check_lengths(cam)
    query_lens = qsl[1:] - qsl[:-1]
    is_prefill = query_lens > decode_threshold
    _check_upper_bound(cam, seq, is_prefill)
    _check_decode_first(query_lens, decode_threshold)
    _check_optional_rows(cam, seq)
    check_padding_slots(cam)
    if block_size is not None:
        check_paging(cam, qsl, seq, block_size, num_blocks)


def _check_required(cam: CommonAttentionMetadata) -> None:
    for name in REQUIRED_FIELDS:
        if getattr(cam, name, None) is None:
            raise MetadataError(name, "a value (required field)", None)
    for name in _INT_FIELDS:
        value = getattr(cam, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise MetadataError(name, "a non-negative int", repr(value))
    if not isinstance(cam.causal, bool):
        raise MetadataError("causal", "a bool", type(cam.causal).__name__)
    for name in TENSOR_FIELDS:
        value = getattr(cam, name)
        if value is not None and not isinstance(value, torch.Tensor):
            raise MetadataError(name, "a torch.Tensor", type(value).__name__)


def _record_device(cam: CommonAttentionMetadata, device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    votes = Counter(getattr(cam, name).device for name in _DEVICE_ANCHORS)
    return votes.most_common(1)[0][0]


def _same_device(found: torch.device, expected: torch.device) -> bool:
    if expected.index is None:
        return found.type == expected.type
    return found == expected


def _check_tensor(t: torch.Tensor, name: str, dtype: torch.dtype, device: torch.device) -> None:
    if t.dtype != dtype:
        raise MetadataError(name, f"dtype {dtype}", t.dtype)
    if not _same_device(t.device, device):
        raise MetadataError(name, f"device {device}", t.device)


def _check_num_reqs(cam: CommonAttentionMetadata) -> None:
    """A `num_reqs` that three of the four per-request counts contradict is named itself."""
    counts = []
    for name in ("query_start_loc", "query_start_loc_cpu", "seq_lens", "block_table_tensor"):
        t = getattr(cam, name)
        if t.dim() >= 1:
            counts.append(t.shape[0] - (1 if name.startswith("query_start_loc") else 0))
    common, votes = Counter(counts).most_common(1)[0] if counts else (cam.num_reqs, 0)
    if votes >= 3 and common != cam.num_reqs:
        raise MetadataError(
            "num_reqs",
            f"{common} (the request count of query_start_loc, seq_lens, block_table_tensor)",
            cam.num_reqs,
        )


def _check_shape(t: torch.Tensor, name: str, rule: str, cam: CommonAttentionMetadata) -> None:
    n, tokens = cam.num_reqs, cam.num_actual_tokens
    if rule == "table":
        if t.dim() != 2 or t.shape[0] != n:
            raise MetadataError(name, f"shape ({n}, max_blocks)", tuple(t.shape))
        return
    if rule == "slots":
        if t.dim() != 1 or t.shape[0] < tokens:
            raise MetadataError(name, f"1-D with >= {tokens} entries", tuple(t.shape))
        return
    shape = {"reqs+1": (n + 1,), "reqs": (n,), "tokens": (tokens,)}[rule]
    if tuple(t.shape) != shape:
        raise MetadataError(name, f"shape {shape}", tuple(t.shape))


def _check_token_count(cam: CommonAttentionMetadata) -> None:
    first, last = int(cam.query_start_loc_cpu[0]), int(cam.query_start_loc_cpu[-1])
    if first != 0:
        raise MetadataError("query_start_loc_cpu[0]", "0", first)
    if last != cam.num_actual_tokens:
        raise MetadataError(
            "num_actual_tokens", f"query_start_loc_cpu[num_reqs] = {last}", cam.num_actual_tokens
        )


def _check_rows(ok: torch.Tensor, name: str, expected: str, *values: torch.Tensor) -> None:
    bad = (~ok).nonzero().flatten()
    if bad.numel():
        row = int(bad[0])
        found = ", ".join(str(int(v[row])) for v in values)
        raise MetadataError(f"{name}[{row}]", expected, found)


def _check_lengths(cam: CommonAttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
    """Query offsets, token count and the max lengths; returns (qsl, seq_lens) on the CPU."""
    qsl = cam.query_start_loc_cpu.to(torch.int64)
    device_qsl = cam.query_start_loc.cpu().to(torch.int64)
    _check_rows(device_qsl == qsl, QSL, "== query_start_loc_cpu", device_qsl, qsl)
    query_lens = qsl[1:] - qsl[:-1]
    _check_rows(query_lens >= 0, "query_start_loc_cpu", "non-decreasing offsets", query_lens)
    max_q = int(query_lens.max()) if cam.num_reqs else 0
    if cam.max_query_len != max_q:
        raise MetadataError("max_query_len", f"the longest query ({max_q})", cam.max_query_len)
    seq = cam.seq_lens.cpu().to(torch.int64)
    _check_rows(seq >= query_lens, "seq_lens", ">= query length", seq, query_lens)
    max_s = int(seq.max()) if cam.num_reqs else 0
    if cam.max_seq_len < max_s:
        raise MetadataError("max_seq_len", f">= longest sequence ({max_s})", cam.max_seq_len)
    return qsl, seq


def _check_upper_bound(
    cam: CommonAttentionMetadata, seq: torch.Tensor, is_prefill: torch.Tensor
) -> None:
    ub = cam.seq_lens_cpu_upper_bound
    if ub is None:
        if bool(is_prefill.any()):
            row = int(is_prefill.nonzero()[0])
            raise MetadataError(
                "seq_lens_cpu_upper_bound",
                f"a CPU tensor (required: request {row} is a prefill)",
                None,
            )
        return
    ub64 = ub.to(torch.int64)
    _check_rows(ub64 >= seq, "seq_lens_cpu_upper_bound", ">= seq_lens", ub64, seq)
    exact = (ub64 == seq) | ~is_prefill
    _check_rows(exact, "seq_lens_cpu_upper_bound", "== seq_lens on a prefill row", ub64, seq)


def _check_decode_first(query_lens: torch.Tensor, threshold: int) -> None:
    seen_prefill = False
    for row, q in enumerate(query_lens.tolist()):
        if q > threshold:
            seen_prefill = True
        elif seen_prefill and q > 0:
            raise MetadataError(
                f"query_start_loc_cpu (request {row})",
                "decode requests ordered before prefills",
                f"a decode of {q} tokens after a prefill",
            )


def _check_optional_rows(cam: CommonAttentionMetadata, seq: torch.Tensor) -> None:
    local = None
    if cam.dcp_local_seq_lens is not None:
        local = cam.dcp_local_seq_lens.cpu().to(torch.int64)
        _check_rows(local <= seq, "dcp_local_seq_lens", "<= seq_lens", local, seq)
    if cam.dcp_local_seq_lens_cpu is not None:
        local_cpu = cam.dcp_local_seq_lens_cpu.to(torch.int64)
        if local is None:
            _check_rows(local_cpu <= seq, "dcp_local_seq_lens_cpu", "<= seq_lens", local_cpu, seq)
        else:
            _check_rows(
                local_cpu == local,
                "dcp_local_seq_lens_cpu",
                "== dcp_local_seq_lens",
                local_cpu,
                local,
            )
    if cam._seq_lens_cpu is not None:
        legacy = cam._seq_lens_cpu.to(torch.int64)
        _check_rows(legacy == seq, "_seq_lens_cpu", "== seq_lens", legacy, seq)
    if cam.positions is not None:
        _check_positions(cam, seq)


def _check_positions(cam: CommonAttentionMetadata, seq: torch.Tensor) -> None:
    qsl = cam.query_start_loc_cpu.tolist()
    positions = cam.positions.cpu()
    for r in range(cam.num_reqs):
        start, end = qsl[r], qsl[r + 1]
        expected = torch.arange(int(seq[r]) - (end - start), int(seq[r]))
        if not torch.equal(positions[start:end], expected):
            raise MetadataError(
                f"positions[{start}:{end}] (request {r})",
                str(expected.tolist()),
                positions[start:end].tolist(),
            )
