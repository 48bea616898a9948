"""The planner call: its keyword arguments and the checks every planner makes on them.

`plan_persistent_decode` and every planner answering its call (the device planner,
AITER's adapter) share `PLANNER_KEYWORDS` and these checks, so that bad input gets the
same `PlanError` (naming the argument) whichever planner sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from conformance.errors import PlanError
from conformance.persistent.profiles import dtype_class

_I64 = np.int64

PLANNER_KEYWORDS: tuple[str, ...] = (
    "num_heads_q",
    "max_seqlen_qo",
    "uni_seqlen_qo",
    "page_size",
    "kv_granularity",
    "causal",
    "max_split_per_batch",
    "q_dtype",
    "kv_dtype",
    "arch",
    "num_cus",
)
"""Keyword arguments of `plan_persistent_decode`, after its three index tensors."""


def check_keywords(call: Mapping[str, Any], *, planner: str) -> None:
    """Every keyword of `PLANNER_KEYWORDS` given, and no other, or `PlanError`."""
    missing = [k for k in PLANNER_KEYWORDS if k not in call]
    extra = sorted(set(call) - set(PLANNER_KEYWORDS))
    if missing or extra:
        raise PlanError(
            f"{planner}: expected the keywords {', '.join(PLANNER_KEYWORDS)}; "
            f"missing {missing}, unexpected {extra}"
        )


def is_power_of_two(value: object) -> bool:
    return isinstance(value, int) and value >= 1 and value & (value - 1) == 0


def as_array(tensor: object, *, argument: str) -> np.ndarray:
    """A 1-D integer tensor (any device) as an int64 numpy array, or `PlanError`."""
    checked = check_index_tensor(tensor, argument=argument)
    return checked.detach().to("cpu").numpy().astype(_I64)


def first_index(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


# ---------------------------------------------------------------------------------------
# Input validation


def check_scalars(
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
    if not is_power_of_two(page_size):
        raise PlanError(f"page_size: expected a power of two, found {page_size!r}")
    if not is_power_of_two(kv_granularity):
        raise PlanError(
            f"kv_granularity: expected a power of two (pages), found {kv_granularity!r}"
        )
    if max_seqlen_qo < 1:  # type: ignore[operator]
        raise PlanError(f"max_seqlen_qo: expected >= 1, found {max_seqlen_qo}")
    if max_split_per_batch == 0:
        raise PlanError("max_split_per_batch: expected -1 (no cap) or >= 1, found 0")


def check_batches(
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
    batch = check_lengths(qo.size, kv.size, last.size)
    if kv[0] != 0:
        raise PlanError(f"kv_indptr: expected kv_indptr[0] == 0, found {kv[0]}")
    if qo[0] != 0:
        raise PlanError(f"qo_indptr: expected qo_indptr[0] == 0, found {qo[0]}")
    pages = np.diff(kv)
    b = first_index(pages < 0)
    if b is not None:
        raise PlanError(
            f"kv_indptr: expected non-decreasing, found kv_indptr[{b}]={kv[b]} > "
            f"kv_indptr[{b + 1}]={kv[b + 1]}"
        )
    q_lens = np.diff(qo)
    b = first_index((q_lens < 1) | (q_lens > max_seqlen_qo))
    if b is not None:
        raise PlanError(
            f"qo_indptr: batch {b} has {q_lens[b]} q tokens (qo_indptr[{b}]="
            f"{qo[b]}, qo_indptr[{b + 1}]={qo[b + 1]}); expected "
            f"1..max_seqlen_qo={max_seqlen_qo}"
        )
    if uni_seqlen_qo > 0:
        b = first_index(qo != uni_seqlen_qo * np.arange(batch + 1, dtype=_I64))
        if b is not None:
            raise PlanError(
                f"uni_seqlen_qo: {uni_seqlen_qo} disagrees with qo_indptr[{b}]="
                f"{qo[b]} (expected {uni_seqlen_qo * b})"
            )
    if page_size == 1:
        tokens = pages
    else:
        b = first_index((pages > 0) & ((last < 1) | (last > page_size)))
        if b is not None:
            raise PlanError(
                f"kv_last_page_lens: batch {b} has {last[b]} tokens in its last "
                f"page; expected 1..page_size={page_size}"
            )
        tokens = np.where(pages > 0, (pages - 1) * page_size + last, 0)
    if causal:
        b = first_index(tokens < q_lens)
        if b is not None:
            raise PlanError(
                f"kv_indptr: batch {b} has {tokens[b]} kv tokens, fewer than its "
                f"{q_lens[b]} q tokens; causal decode needs kv length >= q length "
                f"(max_seqlen_qo={max_seqlen_qo})"
            )
    return q_lens


_SCALARS = (
    "num_cus",
    "num_heads_q",
    "page_size",
    "kv_granularity",
    "max_seqlen_qo",
    "max_split_per_batch",
)
"""The keywords of `check_scalars`, read from a planner call."""


def check_call_scalars(call: Mapping[str, Any]) -> tuple[str, str]:
    """The scalar and dtype checks of a planner call; returns the (q, kv) dtype classes."""
    check_scalars(**{name: call[name] for name in _SCALARS})
    uni = call["uni_seqlen_qo"]
    if isinstance(uni, bool) or not isinstance(uni, int):
        raise PlanError(f"uni_seqlen_qo: expected an int, found {uni!r}")
    q_cls = dtype_class(call["q_dtype"], argument="q_dtype")
    kv_cls = dtype_class(call["kv_dtype"], argument="kv_dtype")
    if q_cls == "fp8" and kv_cls != "fp8":
        raise PlanError(
            f"q_dtype: fp8 q ({call['q_dtype']}) with {call['kv_dtype']} kv (kv_dtype) is not "
            f"a supported persistent MLA combination"
        )
    return q_cls, kv_cls


def check_index_tensor(tensor: object, *, argument: str) -> torch.Tensor:
    """A 1-D integer tensor, checked without reading its data, or `PlanError`."""
    if not isinstance(tensor, torch.Tensor):
        raise PlanError(f"{argument}: expected a 1-D int32 torch.Tensor, found {type(tensor)}")
    if tensor.dim() != 1:
        raise PlanError(f"{argument}: expected a 1-D tensor, found shape {tuple(tensor.shape)}")
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise PlanError(f"{argument}: expected an int32 tensor, found dtype {tensor.dtype}")
    return tensor


def check_lengths(qo_len: int, kv_len: int, last_len: int) -> int:
    """The index tensors' lengths agree; returns the batch size."""
    if kv_len < 2:
        raise PlanError(f"kv_indptr: expected length batch_size + 1 >= 2, found {kv_len}")
    batch = kv_len - 1
    if qo_len != batch + 1:
        raise PlanError(f"qo_indptr: expected length {batch + 1} (len(kv_indptr)), found {qo_len}")
    if last_len != batch:
        raise PlanError(
            f"kv_last_page_lens: expected length {batch} (batch size), found {last_len}"
        )
    return batch
