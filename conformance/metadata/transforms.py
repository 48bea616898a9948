"""Transformations that build a new `CommonAttentionMetadata` from an existing one.

Each is a construction site: every field must come out sliced, copied or recomputed, or
be on the transformation's commented `DROPPED_ON_PURPOSE` list. A field this module does
not know raises at once, so adding a field to the record forces a decision here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, TypeVar

import torch


class _Record(Protocol):
    """What the transformations read of a `CommonAttentionMetadata` (the record imports this
    module for its `unpadded`, so this module never imports the record)."""

    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    num_reqs: int
    num_actual_tokens: int
    dcp_local_seq_lens: Any


CommonAttentionMetadata = TypeVar("CommonAttentionMetadata", bound=_Record)
"""A `conformance.metadata.CommonAttentionMetadata` (each transformation returns its type)."""

# How each field follows a slice of requests/tokens.
PER_REQUEST_FIELDS: tuple[str, ...] = (
    "seq_lens",
    "block_table_tensor",
    "seq_lens_cpu_upper_bound",
    "dcp_local_seq_lens",
    "dcp_local_seq_lens_cpu",
    "is_prefilling",
    "_seq_lens_cpu",
)
PER_TOKEN_FIELDS: tuple[str, ...] = ("slot_mapping", "positions")
COPIED_FIELDS: tuple[str, ...] = ("causal", "max_seq_len")
RECOMPUTED_FIELDS: tuple[str, ...] = (
    "query_start_loc",
    "query_start_loc_cpu",
    "num_reqs",
    "num_actual_tokens",
    "max_query_len",
)
# Per transformation: fields intentionally not carried over, with the reason.
DROPPED_ON_PURPOSE: dict[str, dict[str, str]] = {
    "unpad": {},
    "slice_ubatch": {},
    "decode_view": {},
    "prefill_view": {},
}

# Fields whose values shrink with the query tokens removed from the end of a request.
_LENGTH_FIELDS = ("seq_lens", "seq_lens_cpu_upper_bound", "_seq_lens_cpu")


def _check_known_fields(cam: CommonAttentionMetadata) -> None:
    known = {*PER_REQUEST_FIELDS, *PER_TOKEN_FIELDS, *COPIED_FIELDS, *RECOMPUTED_FIELDS}
    unknown = [f.name for f in dataclasses.fields(cam) if f.name not in known]  # type: ignore[arg-type]
    if unknown:
        raise TypeError(
            f"conformance.metadata.transforms does not know CommonAttentionMetadata field(s) "
            f"{unknown}: classify each in transforms.py (per request, per token, copied, "
            f"recomputed) or list it in DROPPED_ON_PURPOSE with a reason"
        )


def slice_requests(
    cam: CommonAttentionMetadata,
    req_start: int,
    req_stop: int,
    *,
    token_start: int | None = None,
    token_stop: int | None = None,
    transform: str = "slice_ubatch",
) -> CommonAttentionMetadata:
    """Requests ``[req_start, req_stop)`` and tokens ``[token_start, token_stop)``.

    Token bounds default to the requests' own tokens. A bound inside a request splits
    it: the leading part keeps its context and is shortened at the end (its sequence
    lengths drop by the tokens left out), the trailing part keeps its full length.
    """
    _check_known_fields(cam)
    qsl = cam.query_start_loc_cpu.tolist()
    if not 0 <= req_start <= req_stop <= cam.num_reqs:
        raise ValueError(f"request slice [{req_start}, {req_stop}) outside 0..{cam.num_reqs}")
    t0 = qsl[req_start] if token_start is None else token_start
    t1 = qsl[req_stop] if token_stop is None else token_stop
    if req_stop > req_start and not (
        qsl[req_start] <= t0 <= qsl[req_start + 1] and qsl[req_stop - 1] <= t1 <= qsl[req_stop]
    ):
        raise ValueError(
            f"token slice [{t0}, {t1}) does not start in request {req_start} "
            f"and end in request {req_stop - 1}"
        )
    trimmed_end = qsl[req_stop] - t1 if req_stop > req_start else 0
    if trimmed_end and cam.dcp_local_seq_lens is not None:
        raise ValueError("cannot split a request across micro-batches under DCP")

    new_qsl = torch.tensor(qsl[req_start : req_stop + 1], dtype=torch.int64)
    if req_stop > req_start:
        new_qsl[0] = t0
        new_qsl[-1] = t1
    new_qsl = (new_qsl - t0).to(torch.int32)
    query_lens = new_qsl[1:] - new_qsl[:-1]
    values: dict[str, object] = {}
    for name in PER_REQUEST_FIELDS:
        value = getattr(cam, name)
        if value is None:
            values[name] = None
            continue
        sliced = value[req_start:req_stop].clone()
        if name in _LENGTH_FIELDS and trimmed_end:
            sliced[-1] -= trimmed_end
        values[name] = sliced
    for name in PER_TOKEN_FIELDS:
        value = getattr(cam, name)
        values[name] = None if value is None else value[t0:t1].clone()
    for name in COPIED_FIELDS:
        values[name] = getattr(cam, name)
    dropped = DROPPED_ON_PURPOSE.get(transform, {})
    for name in dropped:
        values[name] = None
    return dataclasses.replace(  # type: ignore[type-var]
        cam,
        query_start_loc=new_qsl.to(cam.query_start_loc.device),
        query_start_loc_cpu=new_qsl,
        num_reqs=req_stop - req_start,
        num_actual_tokens=int(t1 - t0),
        max_query_len=int(query_lens.max()) if query_lens.numel() else 0,
        **values,
    )


def unpad(
    cam: CommonAttentionMetadata, *, num_actual_tokens: int, num_actual_reqs: int
) -> CommonAttentionMetadata:
    """The first `num_actual_reqs` requests and `num_actual_tokens` tokens (drop padding)."""
    return slice_requests(
        cam, 0, num_actual_reqs, token_start=0, token_stop=num_actual_tokens, transform="unpad"
    )


def slice_ubatch(
    cam: CommonAttentionMetadata, token_start: int, token_stop: int
) -> CommonAttentionMetadata:
    """The micro-batch holding tokens ``[token_start, token_stop)`` (may split requests)."""
    qsl = cam.query_start_loc_cpu.tolist()
    if not 0 <= token_start < token_stop <= cam.num_actual_tokens:
        raise ValueError(
            f"micro-batch tokens [{token_start}, {token_stop}) outside 0..{cam.num_actual_tokens}"
        )
    first = max(r for r in range(cam.num_reqs) if qsl[r] <= token_start < qsl[r + 1])
    last = max(r for r in range(cam.num_reqs) if qsl[r] < token_stop <= qsl[r + 1])
    return slice_requests(cam, first, last + 1, token_start=token_start, token_stop=token_stop)


def decode_view(cam: CommonAttentionMetadata, num_decodes: int) -> CommonAttentionMetadata:
    """The leading `num_decodes` requests (the builder's decode rows)."""
    return slice_requests(cam, 0, num_decodes, transform="decode_view")


def prefill_view(cam: CommonAttentionMetadata, num_decodes: int) -> CommonAttentionMetadata:
    """The requests after the first `num_decodes` (the builder's prefill rows)."""
    return slice_requests(cam, num_decodes, cam.num_reqs, transform="prefill_view")
