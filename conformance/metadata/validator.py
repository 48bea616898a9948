"""`validate(cam)`: every invariant of `CommonAttentionMetadata` (vllm_mla_interface.md §1.3).

A violation raises `MetadataError` naming the field, what was expected and what was found.
"""

from __future__ import annotations

import torch

from conformance.errors import MetadataError
from conformance.metadata.record import REQUIRED_FIELDS, CommonAttentionMetadata

PAD_SLOT_ID = -1


def validate(
    cam: CommonAttentionMetadata,
    *,
    decode_threshold: int = 1,
    block_size: int | None = None,
    num_blocks: int | None = None,
) -> None:
    """Check every invariant of `cam`; raise `MetadataError` on the first violation.

    `block_size` enables the block-table/slot-mapping agreement checks; `num_blocks`
    bounds the block ids. Rows with a query longer than `decode_threshold` are prefills.
    """
    _check_required(cam)
    device = cam.query_start_loc.device
    n = cam.num_reqs
    _check_tensor(cam.query_start_loc, "query_start_loc", torch.int32, (n + 1,), device)
    _check_tensor(cam.query_start_loc_cpu, "query_start_loc_cpu", torch.int32, (n + 1,), "cpu")
    _check_tensor(cam.seq_lens, "seq_lens", torch.int32, (n,), device)
    qsl = cam.query_start_loc_cpu.to(torch.int64)
    if not torch.equal(cam.query_start_loc.cpu().to(torch.int64), qsl):
        raise MetadataError(
            "query_start_loc", "equal to query_start_loc_cpu", cam.query_start_loc.tolist()
        )
    if int(qsl[0]) != 0:
        raise MetadataError("query_start_loc_cpu", "first entry 0", int(qsl[0]))
    query_lens = qsl[1:] - qsl[:-1]
    if bool((query_lens < 0).any()):
        raise MetadataError("query_start_loc_cpu", "non-decreasing values", qsl.tolist())
    if int(qsl[-1]) != cam.num_actual_tokens:
        raise MetadataError(
            "num_actual_tokens",
            f"query_start_loc[num_reqs] = {int(qsl[-1])}",
            cam.num_actual_tokens,
        )
    max_q = int(query_lens.max()) if n else 0
    if cam.max_query_len < max_q:
        raise MetadataError("max_query_len", f">= longest query ({max_q})", cam.max_query_len)
    seq = cam.seq_lens.cpu().to(torch.int64)
    _check_rows(seq >= query_lens, "seq_lens", ">= query length", seq, query_lens)
    max_s = int(seq.max()) if n else 0
    if cam.max_seq_len < max_s:
        raise MetadataError("max_seq_len", f">= longest sequence ({max_s})", cam.max_seq_len)
    if not isinstance(cam.causal, bool):
        raise MetadataError("causal", "a bool", type(cam.causal).__name__)
    is_prefill = query_lens > decode_threshold
    _check_upper_bound(cam, seq, is_prefill)
    _check_decode_first(query_lens, decode_threshold)
    _check_optional_rows(cam, seq, device)
    _check_tensor(cam.block_table_tensor, "block_table_tensor", torch.int32, None, device, ndim=2)
    if cam.block_table_tensor.shape[0] != n:
        raise MetadataError("block_table_tensor", f"{n} rows", tuple(cam.block_table_tensor.shape))
    _check_tensor(cam.slot_mapping, "slot_mapping", torch.int64, None, device, ndim=1)
    if cam.slot_mapping.shape[0] < cam.num_actual_tokens:
        raise MetadataError(
            "slot_mapping", f">= {cam.num_actual_tokens} entries", cam.slot_mapping.shape[0]
        )
    if block_size is not None:
        _check_paging(cam, qsl, seq, block_size, num_blocks)


def _check_required(cam: CommonAttentionMetadata) -> None:
    for name in REQUIRED_FIELDS:
        if getattr(cam, name, None) is None:
            raise MetadataError(name, "a value (required field)", None)
    for name in ("num_reqs", "num_actual_tokens", "max_query_len", "max_seq_len"):
        value = getattr(cam, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise MetadataError(name, "a non-negative int", repr(value))


def _check_tensor(
    t: object,
    name: str,
    dtype: torch.dtype,
    shape: tuple[int, ...] | None,
    device: torch.device | str,
    *,
    ndim: int | None = None,
) -> None:
    if not isinstance(t, torch.Tensor):
        raise MetadataError(name, "a torch.Tensor", type(t).__name__)
    if t.dtype != dtype:
        raise MetadataError(name, f"dtype {dtype}", t.dtype)
    if shape is not None and tuple(t.shape) != shape:
        raise MetadataError(name, f"shape {shape}", tuple(t.shape))
    if ndim is not None and t.dim() != ndim:
        raise MetadataError(name, f"{ndim} dimensions", tuple(t.shape))
    if t.device != torch.device(device):
        raise MetadataError(name, f"device {torch.device(device)}", t.device)


def _check_rows(ok: torch.Tensor, name: str, expected: str, *values: torch.Tensor) -> None:
    bad = (~ok).nonzero().flatten()
    if bad.numel():
        row = int(bad[0])
        found = ", ".join(str(int(v[row])) for v in values)
        raise MetadataError(f"{name}[{row}]", expected, found)


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
    _check_tensor(ub, "seq_lens_cpu_upper_bound", torch.int32, (cam.num_reqs,), "cpu")
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


def _check_optional_rows(
    cam: CommonAttentionMetadata, seq: torch.Tensor, device: torch.device
) -> None:
    n = cam.num_reqs
    if cam.dcp_local_seq_lens is not None:
        _check_tensor(cam.dcp_local_seq_lens, "dcp_local_seq_lens", torch.int32, (n,), device)
        local = cam.dcp_local_seq_lens.cpu().to(torch.int64)
        _check_rows(local <= seq, "dcp_local_seq_lens", "<= seq_lens", local, seq)
        cpu = cam.dcp_local_seq_lens_cpu
        if cpu is not None and not torch.equal(cpu.to(torch.int64), local):
            raise MetadataError("dcp_local_seq_lens_cpu", "equal to dcp_local_seq_lens", cpu)
    if cam.is_prefilling is not None:
        _check_tensor(cam.is_prefilling, "is_prefilling", torch.bool, (n,), device)
    if cam.positions is not None:
        _check_tensor(cam.positions, "positions", torch.int64, (cam.num_actual_tokens,), device)
        _check_positions(cam, seq)
    if cam._seq_lens_cpu is not None and not torch.equal(cam._seq_lens_cpu.to(torch.int64), seq):
        raise MetadataError("_seq_lens_cpu", "equal to seq_lens", cam._seq_lens_cpu.tolist())


def _check_positions(cam: CommonAttentionMetadata, seq: torch.Tensor) -> None:
    qsl = cam.query_start_loc_cpu.tolist()
    positions = cam.positions.cpu()
    for r in range(cam.num_reqs):
        start, end = qsl[r], qsl[r + 1]
        expected = torch.arange(int(seq[r]) - (end - start), int(seq[r]))
        if not torch.equal(positions[start:end], expected):
            raise MetadataError(
                f"positions[{start}:{end}]", str(expected.tolist()), positions[start:end].tolist()
            )


def _check_paging(
    cam: CommonAttentionMetadata,
    qsl: torch.Tensor,
    seq: torch.Tensor,
    block_size: int,
    num_blocks: int | None,
) -> None:
    table = cam.block_table_tensor.cpu().to(torch.int64)
    slots = cam.slot_mapping.cpu()
    need = (seq + block_size - 1) // block_size
    if cam.num_reqs and int(need.max()) > table.shape[1]:
        row = int(need.argmax())
        raise MetadataError(
            f"block_table_tensor[{row}]", f">= {int(need[row])} blocks", table.shape[1]
        )
    for r in range(cam.num_reqs):
        blocks = table[r, : int(need[r])]
        if bool((blocks < 0).any()) or (
            num_blocks is not None and bool((blocks >= num_blocks).any())
        ):
            raise MetadataError(
                f"block_table_tensor[{r}]", f"block ids in [0, {num_blocks})", blocks.tolist()
            )
        start, end = int(qsl[r]), int(qsl[r + 1])
        if start == end:
            continue
        context = int(seq[r]) - (end - start)
        pos = torch.arange(context, int(seq[r]))
        expected = blocks[pos // block_size] * block_size + pos % block_size
        if not torch.equal(slots[start:end], expected):
            bad = int((slots[start:end] != expected).nonzero()[0])
            raise MetadataError(
                f"slot_mapping[{start + bad}]",
                f"slot {int(expected[bad])} (request {r}, position {int(pos[bad])})",
                int(slots[start + bad]),
            )
    tail = slots[cam.num_actual_tokens :]
    if bool((tail != PAD_SLOT_ID).any()):
        raise MetadataError("slot_mapping", f"{PAD_SLOT_ID} on padding tokens", tail.tolist())
