"""`validate(cam)`: every invariant of `CommonAttentionMetadata`, as the table `RULES`.

A violation raises `MetadataError` naming the field (with the request or index where one
is at fault), what was expected and what was found. The rules (code, check, one line of
doc) run in the table's order and the first broken one raises; docs/validator.md lists
them. V1-V20 live in `conformance.metadata.record_rules`, the paging rules V21-V26 in
`conformance.metadata.paging`.
"""

from __future__ import annotations

import torch

from conformance.metadata import paging
from conformance.metadata import record_rules as rr
from conformance.metadata.checked import Checked
from conformance.metadata.paging import PAD_SLOT_ID
from conformance.metadata.record import CommonAttentionMetadata
from conformance.metadata.record_rules import TENSOR_FIELDS
from conformance.rule_table import Rule

__all__ = ["PAD_SLOT_ID", "RULES", "TENSOR_FIELDS", "Rule", "validate"]


RULES: tuple[Rule[Checked], ...] = (
    # fields and types
    Rule(
        "V1",
        rr.check_required,
        "Every required field is set: `query_start_loc`, `query_start_loc_cpu`, `seq_lens`, "
        "`num_reqs`, `num_actual_tokens`, `max_query_len`, `max_seq_len`, "
        "`block_table_tensor`, `slot_mapping`.",
    ),
    Rule(
        "V2",
        rr.check_scalars,
        "`num_reqs`, `num_actual_tokens`, `max_query_len`, `max_seq_len` are non-negative "
        "`int`s (not `bool`, not `float`); `causal` is a `bool`.",
    ),
    Rule(
        "V3",
        rr.check_tensor_types,
        "Every tensor field that is set, optional ones included, is a `torch.Tensor`.",
    ),
    Rule(
        "V4",
        rr.check_dtypes,
        "Every tensor field has its dtype: int32 for `query_start_loc`, "
        "`query_start_loc_cpu`, `seq_lens`, `block_table_tensor`, `seq_lens_cpu_upper_bound`, "
        "`dcp_local_seq_lens`, `dcp_local_seq_lens_cpu`, `_seq_lens_cpu`; int64 for "
        "`slot_mapping`, `positions`; bool for `is_prefilling`.",
    ),
    Rule(
        "V5",
        rr.check_devices,
        "The `_cpu` fields and `seq_lens_cpu_upper_bound` are on the CPU; every other tensor "
        "is on the builder's device (without a `device` argument: the device most required "
        "tensors are on). A device without an index (`cuda`) matches any index.",
    ),
    # shapes and counts
    Rule(
        "V6",
        rr.check_num_reqs,
        "`num_reqs` agrees with `query_start_loc`, `query_start_loc_cpu`, `seq_lens` and the "
        "rows of `block_table_tensor`; when three of them agree on another count, `num_reqs` "
        "is named, otherwise the odd tensor.",
    ),
    Rule(
        "V7",
        rr.check_request_shapes,
        "`query_start_loc` and `query_start_loc_cpu` are `[num_reqs + 1]`; `seq_lens`, "
        "`seq_lens_cpu_upper_bound`, `dcp_local_seq_lens(_cpu)`, `is_prefilling`, "
        "`_seq_lens_cpu` are `[num_reqs]`; `block_table_tensor` is 2-D with `num_reqs` rows.",
    ),
    Rule(
        "V8",
        rr.check_token_count,
        "`query_start_loc_cpu` starts at 0 and ends at `num_actual_tokens`.",
    ),
    Rule(
        "V9",
        rr.check_token_shapes,
        "`slot_mapping` is 1-D with at least `num_actual_tokens` entries; `positions` is "
        "`[num_actual_tokens]`.",
    ),
    # lengths
    Rule(
        "V10",
        rr.check_offsets_increase,
        "`query_start_loc_cpu` never decreases (named at the first request whose query "
        "length would be negative).",
    ),
    Rule("V11", rr.check_device_offsets, "`query_start_loc` equals `query_start_loc_cpu`."),
    Rule(
        "V12",
        rr.check_max_query_len,
        "`max_query_len` is exactly the longest query (0 for an empty batch).",
    ),
    Rule("V13", rr.check_seq_covers_query, "`seq_lens` is at least the query length on every row."),
    Rule(
        "V14",
        rr.check_max_seq_len,
        "`max_seq_len` is at least the longest sequence (an over-estimate is fine).",
    ),
    Rule(
        "V15",
        rr.check_upper_bound,
        "`seq_lens_cpu_upper_bound` is set when any row is a prefill (query longer than "
        "`decode_threshold`); it is at least `seq_lens` everywhere and equal to it on prefill "
        "rows.",
    ),
    Rule(
        "V16",
        rr.check_decodes_first,
        "Decode rows come before prefill rows (padding rows of query length 0 may follow either).",
    ),
    Rule(
        "V17",
        rr.check_dcp_lens,
        "`dcp_local_seq_lens` is at most `seq_lens`; `dcp_local_seq_lens_cpu` equals it (at "
        "most `seq_lens` when it comes alone).",
    ),
    Rule("V18", rr.check_legacy_seq_lens, "`_seq_lens_cpu` equals `seq_lens`."),
    Rule(
        "V19",
        rr.check_positions,
        "`positions` of each request's new tokens run from `seq_len - query_len` to `seq_len - 1`.",
    ),
    Rule(
        "V20",
        rr.check_padding_slots,
        "`slot_mapping` entries past `num_actual_tokens` (padding tokens) are -1.",
    ),
    # paging: only with `block_size`
    Rule(
        "V21",
        paging.check_table_width,
        "Each row of `block_table_tensor` is wide enough for its request's live blocks.",
    ),
    Rule(
        "V22",
        paging.check_block_ids,
        "Live block ids are non-negative and, with `num_blocks`, below `num_blocks`.",
    ),
    Rule("V23", paging.check_no_null_block, "No live block is the reserved null block 0."),
    Rule("V24", paging.check_distinct_blocks, "A request's live blocks are distinct."),
    Rule(
        "V25",
        paging.check_slots,
        "Each new token's slot is `block * block_size + offset` of its position in its own table.",
    ),
    Rule(
        "V26",
        paging.check_write_ownership,
        "A block a request writes a new token to is live in no other request (no KV write "
        "into another request's cache); blocks that are only read may be shared (a cached "
        "prefix).",
    ),
)
"""Every rule of `validate`, in the order they run; each check raises `MetadataError`."""


def validate(
    cam: CommonAttentionMetadata,
    *,
    decode_threshold: int = 1,
    block_size: int | None = None,
    num_blocks: int | None = None,
    device: torch.device | str | None = None,
) -> None:
    """Check every rule of `RULES` on `cam`; raise `MetadataError` on the first violation.

    Rows with a query longer than `decode_threshold` are prefills. `device` is where the
    device-side tensors must live (default: where most of the required ones are).

    Without `block_size` the paging rules (V21-V26) cannot run: the block table's width,
    the range of its live block ids, the reserved null block, the agreement of
    `slot_mapping` with the table and the ownership of the blocks new tokens are written
    to all go unchecked. Without `num_blocks` live block ids are bounded below only.
    """
    paging.check_paging_facts(block_size, num_blocks)
    checked = Checked(cam, decode_threshold, block_size, num_blocks, device)
    for rule in RULES:
        rule.check(checked)
