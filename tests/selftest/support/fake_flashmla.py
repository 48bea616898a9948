"""A CPU stand-in for FlashMLA's ops, with their exact positional signatures.

The one double of FlashMLA for the ``flashmla`` backend's selftests. It follows the ops as
vLLM's wheel registers them (``torch.ops._flashmla_C`` and ``torch.ops._flashmla_extension_C``;
FlashMLA's ``flash_mla_interface.py`` and vLLM's ``v1/attention/ops/flashmla.py`` call them):

- ``dense_decode_fwd(q, k_cache, head_dim_v, cache_seqlens, block_table, softmax_scale,
  causal, tile_scheduler_metadata, num_splits, out)`` → ``(out, lse, tile_scheduler_metadata,
  num_splits)``: bf16 q; the schedule is made on the call that passes None and returned;
- ``get_mla_decoding_metadata_dense_fp8(cache_seqlens, num_q_tokens_per_head_k, num_heads_k)``
  → ``(tile_scheduler_metadata, num_splits)``;
- ``fwd_kvcache_mla_fp8(q, k_cache, head_dim_v, cache_seqlens, block_table, softmax_scale,
  causal, tile_scheduler_metadata, num_splits, descale_q, descale_k)`` → ``(out, lse)``: e4m3
  q and cache, per-tensor descales (a None descale is 1).

Shapes as FlashMLA takes them: q ``[b, s_q, h_q, 576]``, k_cache ``[pages, 64, 1, 576]``
(64-token pages only, as FlashMLA checks), out ``[b, s_q, h_q, 512]``, lse ``[b, h_q, s_q]``
in the natural log, +inf for a row that sees no token. Causal rows end at the context's end.

The tile schedule is the stand-in's own format with FlashMLA's shapes (``[parts, 8]`` int32
and ``num_splits [b + 1]``): each part walks its range of (request, page) pairs, and the
result of a request is merged from the parts that covered it. As with FlashMLA, a schedule
made for another batch covers the wrong pages: a request's pages past its range are never
read. Every call is logged in `CALLS`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

PAGE = 64
HEAD_DIM, HEAD_DIM_V = 576, 512
PARTS = 3
CALLS: list[tuple[str, dict[str, Any]]] = []


class FlashMLAError(RuntimeError):
    """FlashMLA's ``TORCH_CHECK`` failing."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise FlashMLAError(message)


def make_schedule(cache_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tile_scheduler_metadata [PARTS, 8], num_splits [b + 1])`` over the batch's pages."""
    pages = [-(-int(n) // PAGE) for n in cache_seqlens.tolist()]
    flat = [(r, k) for r, n in enumerate(pages) for k in range(n)]
    per_part = max(1, -(-len(flat) // PARTS))
    rows, splits = [], [0] * len(pages)
    for part in range(PARTS):
        chunk = flat[part * per_part : (part + 1) * per_part]
        if not chunk:
            rows.append([0, 0, -1, 0, 0, 0, 0, 0])
            continue
        (r0, k0), (r1, k1) = chunk[0], chunk[-1]
        rows.append([r0, k0, r1, k1 + 1, 0, 0, 0, 0])
        for r in {r for r, _ in chunk}:
            splits[r] += 1
    num_splits = torch.tensor([0, *splits], dtype=torch.int32).cumsum(0).to(torch.int32)
    return torch.tensor(rows, dtype=torch.int32), num_splits


def _ranges(metadata: torch.Tensor, pages: list[int]) -> list[tuple[int, int, int]]:
    """``(request, first page, end page)`` ranges the schedule's parts walk."""
    covered = []
    for r0, k0, r1, k1, *_ in metadata.tolist():
        for r in range(r0, r1 + 1):
            if r >= len(pages):
                break
            start = k0 if r == r0 else 0
            end = k1 if r == r1 else pages[r]
            covered.append((r, start, min(end, pages[r])))
    return covered


def _attend(q, k_cache, cache_seqlens, block_table, scale, causal, metadata, num_splits):
    b, s_q, h, _ = q.shape
    _check(k_cache.dim() == 4 and k_cache.shape[1] == PAGE, "page_block_size must be 64")
    _check(k_cache.shape[2] == 1 and k_cache.shape[3] == HEAD_DIM, "k_cache: [pages, 64, 1, 576]")
    _check(cache_seqlens.dtype == torch.int32 and cache_seqlens.shape == (b,), "cache_seqlens")
    _check(block_table.dtype == torch.int32 and block_table.shape[0] == b, "block_table")
    _check(num_splits.shape == (b + 1,), "num_splits: [batch_size + 1]")
    lens = [int(n) for n in cache_seqlens.tolist()]
    pages = [-(-n // PAGE) for n in lens]
    cache = k_cache[:, :, 0].float()
    mass = torch.zeros((b, s_q, h), dtype=torch.float64)
    acc = torch.zeros((b, s_q, h, HEAD_DIM_V), dtype=torch.float64)
    peak = torch.full((b, s_q, h), float("-inf"), dtype=torch.float64)
    parts = []
    for r, start, end in _ranges(metadata, pages):
        positions = [
            k * PAGE + slot
            for k in range(start, end)
            for slot in range(PAGE)
            if k * PAGE + slot < lens[r]
        ]
        if positions:
            kv = torch.stack([cache[int(block_table[r, p // PAGE]), p % PAGE] for p in positions])
            kv = kv.double()
            s = torch.einsum("thd,nd->thn", q[r].double(), kv) * scale
            if causal:
                pos = torch.tensor(positions)
                limit = lens[r] - s_q + torch.arange(s_q)
                s = s.masked_fill(pos[None, None, :] > limit[:, None, None], float("-inf"))
            parts.append((r, s, kv[:, :HEAD_DIM_V]))
    for r, s, _ in parts:
        peak[r] = torch.maximum(peak[r], s.amax(-1))
    for r, s, v in parts:
        p = torch.exp(s - peak[r][..., None]).nan_to_num(0.0)
        mass[r] += p.sum(-1)
        acc[r] += torch.einsum("thn,nd->thd", p, v)
    out = (acc / mass[..., None]).nan_to_num(0.0)
    lse = torch.where(mass > 0, peak + torch.log(mass), torch.full_like(mass, math.inf))
    return out.to(torch.bfloat16), lse.float().permute(0, 2, 1).contiguous()


class DenseOps:
    """``torch.ops._flashmla_C``."""

    @staticmethod
    def dense_decode_fwd(
        q, k_cache, head_dim_v, cache_seqlens, block_table, softmax_scale, causal,
        tile_scheduler_metadata, num_splits, out,
    ):  # fmt: skip
        CALLS.append(("dense", dict(locals())))
        _check(q.dtype == torch.bfloat16 and q.dim() == 4, "q: bf16 [b, s_q, h_q, 576]")
        _check(head_dim_v == HEAD_DIM_V, "head_dim_v must be 512")
        b, s_q, h_q, _ = q.shape  # FlashMLA folds the query tokens into the heads
        folded = (b, 1, s_q * h_q, HEAD_DIM_V)
        _check(
            out is None or tuple(out.shape) == folded,
            "out must have shape (batch_size, num_heads, q_seq_per_hk, head_size_v)",
        )
        if tile_scheduler_metadata is None:
            tile_scheduler_metadata, num_splits = make_schedule(cache_seqlens)
        o, lse = _attend(
            q.float(), k_cache, cache_seqlens, block_table, softmax_scale, causal,
            tile_scheduler_metadata, num_splits,
        )  # fmt: skip
        return o, lse, tile_scheduler_metadata, num_splits


class Fp8Ops:
    """``torch.ops._flashmla_extension_C``."""

    @staticmethod
    def get_mla_decoding_metadata_dense_fp8(cache_seqlens, num_q_tokens_per_head_k, num_heads_k):
        CALLS.append(("fp8_metadata", dict(locals())))
        _check(num_heads_k == 1, "num_heads_k must be 1 (MLA)")
        return make_schedule(cache_seqlens)

    @staticmethod
    def fwd_kvcache_mla_fp8(
        q, k_cache, head_dim_v, cache_seqlens, block_table, softmax_scale, causal,
        tile_scheduler_metadata, num_splits, descale_q, descale_k,
    ):  # fmt: skip
        CALLS.append(("fp8", dict(locals())))
        e4m3 = torch.float8_e4m3fn
        _check(q.dtype == e4m3 and k_cache.dtype == e4m3, "q and k_cache: float8_e4m3fn")
        _check(head_dim_v == HEAD_DIM_V, "head_dim_v must be 512")
        _check(tile_scheduler_metadata is not None, "tile_scheduler_metadata is required")
        dq = 1.0 if descale_q is None else float(descale_q.reshape(-1)[0])
        dk = 1.0 if descale_k is None else float(descale_k.reshape(-1)[0])
        o, lse = _attend(
            q.float() * dq, k_cache.float() * dk, cache_seqlens, block_table, softmax_scale,
            causal, tile_scheduler_metadata, num_splits,
        )  # fmt: skip
        return o, lse


def ops(*, fp8: bool = True) -> Any:
    """A `backends.flashmla.ops.FlashMLAOps` over the stand-in."""
    from backends.flashmla.ops import FlashMLAOps

    return FlashMLAOps(DenseOps, Fp8Ops if fp8 else None, "stand-in", {"fake.so": "0" * 64})
