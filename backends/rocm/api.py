"""AITER's Python API as the ROCm adapter targets it: argument names, order and shapes.

The expected signatures of ``aiter.get_mla_metadata_info_v1``, ``aiter.get_mla_metadata_v1``
and ``aiter.mla.mla_decode_fwd``, the checks of an installed aiter against them, and
`AiterApi`, the callables and facts resolved from one (`backends.rocm.probe` resolves it).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

NUM_KV_HEADS = 1
QK_HEAD_DIM = 576
KV_LORA_RANK = 512

METADATA_POSITIONAL: tuple[str, ...] = (
    "seqlens_qo_indptr",
    "seqlens_kv_indptr",
    "kv_last_page_lens",
    "num_heads_per_head_k",
    "num_heads_k",
    "is_causal",
    "work_metadata_ptrs",
    "work_info_set",
    "work_indptr",
    "reduce_indptr",
    "reduce_final_map",
    "reduce_partial_map",
)
"""``get_mla_metadata_v1``'s leading parameters, in order (note work_info_set first)."""
METADATA_KEYWORDS: tuple[str, ...] = (
    "page_size",
    "kv_granularity",
    "max_seqlen_qo",
    "uni_seqlen_qo",
    "fast_mode",
    "max_split_per_batch",
    "intra_batch_mode",
)
COMPONENT_DTYPE_KEYWORDS: tuple[str, ...] = (
    "dtype_q_nope",
    "dtype_q_rope",
    "dtype_kv_nope",
    "dtype_kv_rope",
)
LEGACY_DTYPE_KEYWORDS: tuple[str, ...] = (
    "dtype_q",
    "dtype_kv",
)
INFO_POSITIONAL: tuple[str, ...] = (
    "batch_size",
    "max_seqlen_qo",
    "num_head_qo",
    "q_dtype",
    "kv_dtype",
    "is_sparse",
)
INFO_KEYWORDS: tuple[str, ...] = (
    "fast_mode",
    "intra_batch_mode",
    "max_split_per_batch",
)
DECODE_POSITIONAL: tuple[str, ...] = (
    "q",
    "kv_buffer",
    "o",
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "kv_last_page_lens",
    "max_seqlen_q",
)
DECODE_KEYWORDS: tuple[str, ...] = (
    "page_size",
    "nhead_kv",
    "sm_scale",
    "num_kv_splits",
    "work_meta_data",
    "work_indptr",
    "work_info_set",
    "reduce_indptr",
    "reduce_final_map",
    "reduce_partial_map",
    "q_scale",
    "kv_scale",
    "return_lse",
    "causal",
)


@dataclass(frozen=True)
class AiterApi:
    """The AITER callables and facts the adapter uses, checked against the expected API."""

    metadata_info: Callable[..., Any]
    """``aiter.get_mla_metadata_info_v1``"""
    metadata: Callable[..., Any]
    """``aiter.get_mla_metadata_v1``"""
    decode: Callable[..., Any]
    """``aiter.mla.mla_decode_fwd``"""
    fp8: torch.dtype
    """``aiter.dtypes.fp8``"""
    arch: str
    """``aiter.jit.utils.chip_info.get_gfx()``"""
    num_cus: int
    """``aiter.jit.utils.chip_info.get_cu_num()`` (``CU_NUM`` or rocminfo): buffer sizing."""
    dtype_keywords: tuple[str, ...]
    """The dtype keywords ``get_mla_metadata_v1`` takes (per-component, else legacy)."""
    version: str
    is_standin: bool
    gate: Callable[[], int] | None = None
    """``aiter.mla._persistent_mla_decode_max_batch`` (the gate value AITER caches), if any."""


def _parameters(function: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return None


def signature_problem(
    function: Callable[..., Any],
    qualname: str,
    *,
    positional: Sequence[str],
    keywords: Sequence[str],
) -> str | None:
    """Why `function` does not take `positional` (in order) and `keywords`, or None."""
    params = _parameters(function)
    if params is None:
        return None
    names = [p.name for p in params]
    if names[: len(positional)] != list(positional):
        return (
            f"{qualname} takes {tuple(names[: len(positional)])} first, expected "
            f"{tuple(positional)}: this aiter's API differs from the one the adapter targets"
        )
    missing = [k for k in keywords if k not in names]
    if missing:
        return f"{qualname} has no parameter {', '.join(missing)}"
    return None


def metadata_dtype_keywords(function: Callable[..., Any]) -> tuple[str, ...] | str:
    """The dtype keywords of ``get_mla_metadata_v1``, or why it has none."""
    params = _parameters(function)
    if params is None:
        return COMPONENT_DTYPE_KEYWORDS
    names = {p.name for p in params}
    if set(COMPONENT_DTYPE_KEYWORDS) <= names:
        return COMPONENT_DTYPE_KEYWORDS
    if set(LEGACY_DTYPE_KEYWORDS) <= names:
        return LEGACY_DTYPE_KEYWORDS
    return (
        "aiter.get_mla_metadata_v1 takes no dtype arguments (dtype_q_nope/dtype_kv_nope or "
        "dtype_q/dtype_kv): it would plan every run for bf16 (vLLM #46997)"
    )
