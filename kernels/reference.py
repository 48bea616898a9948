"""The monolithic MLA decode reference: exact math on the dequantised inputs, in fp64.

Absorbed MLA decode, one kv head (module docstrings of `kernels.paged` give the cache
layout). For query token ``i`` (0-based) of a request with ``s`` query tokens and ``L`` kv
tokens (``seq_lens`` counts the new tokens too), causal decoding lets the token see kv
positions ``[0, L - s + i]``. With ``S = (q · k) * sm_scale * q_scale * kv_scale``::

    out = softmax(S) @ V * kv_scale        V = kv[..., :kv_lora_rank]
    lse = logsumexp(S)                     natural log

fp8 inputs are dequantised exactly (every e4m3 value is an fp64 value; the scales are
applied to the scores and the output, not to the operands). No rounding of P happens here:
AITER's fp8 rounding of P is plan dependent and lives in `kernels.plan_exec`.

**Empty rows.** A query row that sees no kv token (``seq_len == 0``, or ``L - s + i < 0``)
gets ``out = 0`` and ``lse = -inf``: the empty sum's log, with the output of an empty
mixture taken as 0. FlashMLA writes ``lse = +inf`` there; this suite uses ``-inf`` because
it is the value that gives the row weight 0 in an LSE merge.
"""

from __future__ import annotations

import itertools

import torch

from conformance.numerics.fp8 import round_through, scale_value
from kernels.paged import gather_request_kv, paged_cache_view


def attend_rows(
    q: torch.Tensor,
    kv: torch.Tensor,
    *,
    visible: torch.Tensor,
    scale: float,
    v_scale: float,
    kv_lora_rank: int,
    p_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of query rows over a prefix-masked run of kv tokens, in q's dtype.

    `q` is ``[n, H, D]``, `kv` is ``[L, D]`` (same dtype), ``visible[r]`` is how many of the
    first kv tokens row ``r`` sees (clamped to ``[0, L]``). Scores are ``(q · k) * scale``;
    ``P = exp(S - m)`` with ``m`` the row max; when `p_dtype` is given P is rounded to it
    before ``P @ V`` while the normaliser ``ΣP`` uses the unrounded P (AITER's fp8 rule).
    Returns ``(out [n, H, kv_lora_rank], lse [n, H])``; rows that see nothing get 0 / -inf.
    """
    n, heads, width = q.shape
    length = kv.shape[0]
    out = q.new_zeros((n, heads, kv_lora_rank))
    lse = q.new_full((n, heads), float("-inf"))
    if n == 0 or length == 0:
        return out, lse
    scores = (q.reshape(n * heads, width) @ kv.T).view(n, heads, length) * scale
    seen = torch.arange(length, device=q.device)[None, :] < visible.to(q.device)[:, None]
    scores = scores.masked_fill(~seen[:, None, :], float("-inf"))
    row_max = scores.amax(dim=-1)
    shift = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
    p = torch.exp(scores - shift[..., None])
    denom = p.sum(dim=-1)
    if p_dtype is not None:
        p = round_through(p, p_dtype)
    acc = (p.reshape(n * heads, length) @ kv[:, :kv_lora_rank]).view(n, heads, kv_lora_rank)
    has = denom > 0
    out = torch.where(has[..., None], acc / denom[..., None] * v_scale, out)
    lse = torch.where(has, row_max + torch.log(denom), lse)
    return out, lse


def _check_decode_inputs(
    q: torch.Tensor,
    cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    kv_lora_rank: int,
) -> None:
    """Raise ValueError naming the first inconsistent argument."""
    if q.dim() != 3:
        raise ValueError(f"q: expected [num_tokens, H, D], found shape {tuple(q.shape)}")
    if q.shape[-1] != cache.shape[-1]:
        raise ValueError(
            f"q/kv_cache: expected the same row width, found {q.shape[-1]} and {cache.shape[-1]}"
        )
    if not 0 < kv_lora_rank <= cache.shape[-1]:
        raise ValueError(f"kv_lora_rank: expected 1..{cache.shape[-1]}, found {kv_lora_rank}")
    batch = len(seq_lens)
    qsl = query_start_loc.tolist()
    if len(qsl) != batch + 1:
        raise ValueError(
            f"query_start_loc: expected {batch + 1} entries (len(seq_lens) + 1), found {len(qsl)}"
        )
    if qsl[0] != 0 or qsl[-1] != q.shape[0] or any(a > b for a, b in itertools.pairwise(qsl)):
        raise ValueError(
            f"query_start_loc: expected non-decreasing from 0 to {q.shape[0]}, found {qsl}"
        )
    if bool((seq_lens < 0).any()):
        raise ValueError(f"seq_lens: expected >= 0, found {seq_lens.tolist()}")
    if block_table.dim() != 2 or block_table.shape[0] != batch:
        raise ValueError(
            f"block_table: expected [{batch}, max_blocks], found {tuple(block_table.shape)}"
        )


def mla_decode_reference(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    sm_scale: float,
    q_scale: float | torch.Tensor = 1.0,
    kv_scale: float | torch.Tensor = 1.0,
    causal: bool = True,
    kv_lora_rank: int = 512,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Monolithic MLA decode over a paged cache, computed in `dtype` (fp64 by default).

    `q` ``[num_tokens, H, D]`` (any float dtype, fp8 with `q_scale`), `kv_cache`
    ``[num_blocks, page_size, D]`` (fp8 with `kv_scale`); requests are given by
    `query_start_loc` ``[B+1]``, `seq_lens` ``[B]`` (kv tokens including the new ones) and
    `block_table` ``[B, max_blocks]``. Only slots of tokens below each `seq_lens` entry are
    read. Returns ``(out [num_tokens, H, kv_lora_rank], lse [num_tokens, H])`` in `dtype`;
    empty rows are ``0`` / ``-inf`` (see the module docstring). Computes on the CPU (inputs
    on another device are copied); results are CPU tensors.
    """
    q, cache = q.cpu(), paged_cache_view(kv_cache).cpu()
    query_start_loc, seq_lens, block_table = (
        query_start_loc.cpu(),
        seq_lens.cpu(),
        block_table.cpu(),
    )
    _check_decode_inputs(q, cache, query_start_loc, seq_lens, block_table, kv_lora_rank)
    page_size = cache.shape[1]
    q_s, kv_s = scale_value(q_scale), scale_value(kv_scale)
    scale = float(sm_scale) * q_s * kv_s
    out = torch.zeros((q.shape[0], q.shape[1], kv_lora_rank), dtype=dtype)
    lse = torch.full((q.shape[0], q.shape[1]), float("-inf"), dtype=dtype)
    qsl = query_start_loc.tolist()
    for b, seq_len in enumerate(seq_lens.tolist()):
        q0, q1 = qsl[b], qsl[b + 1]
        q_len = q1 - q0
        if q_len == 0:
            continue
        kv = gather_request_kv(cache, block_table[b], seq_len, page_size).to(dtype)
        if causal:
            visible = (seq_len - q_len + 1 + torch.arange(q_len)).clamp(0, seq_len)
        else:
            visible = torch.full((q_len,), seq_len)
        out[q0:q1], lse[q0:q1] = attend_rows(
            q[q0:q1].to(dtype),
            kv,
            visible=visible,
            scale=scale,
            v_scale=kv_s,
            kv_lora_rank=kv_lora_rank,
        )
    return out, lse
