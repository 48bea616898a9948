"""``dense_torch``: dense fp32 attention over the gathered paged cache, no work plan.

A plan-free backend (``plan_format = None``): the suite's shared builder makes its decode
metadata (paged-KV CSR lists, no plan) and `decode_scaled` attends request by request.
The class attributes are its whole declaration; the suite derives what applies from them.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from backends.base import Availability, Backend, DecodeMetadata, DecodeScales, MetadataBuilder
from backends.common import PlanFreeBuilder
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

KV_LORA_RANK = 512  # the output row: the latent part of each cache row


def request_kv(kv_cache: torch.Tensor, decode: DecodeMetadata, request: int) -> torch.Tensor:
    """The kv tokens ``[L, 576]`` of one request, from the CSR page list."""
    page = decode.page_size
    lo, hi = int(decode.kv_indptr[request]), int(decode.kv_indptr[request + 1])
    if hi == lo:
        return kv_cache.new_zeros((0, kv_cache.shape[-1]))
    length = (hi - lo - 1) * page + int(decode.kv_last_page_lens[request])
    pages = decode.kv_indices[lo:hi].to(torch.int64)
    t = torch.arange(length, device=pages.device)
    slots = pages[t // page] * page + t % page
    return kv_cache.reshape(-1, kv_cache.shape[-1]).index_select(0, slots)


def attend(
    q: torch.Tensor, kv: torch.Tensor, *, causal: bool, scales: DecodeScales
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of ``[n, H, 576]`` q rows over ``[L, 576]`` kv tokens, in fp32."""
    n, length = q.shape[0], kv.shape[0]
    scores = torch.einsum("nhd,ld->nhl", q.float(), kv.float())
    scores = scores * (scales.sm_scale * scales.q_scale * scales.kv_scale)
    if causal:
        visible = length - n + 1 + torch.arange(n, device=q.device)  # bottom-right aligned
        hidden = torch.arange(length, device=q.device)[None, :] >= visible[:, None]
        scores = scores.masked_fill(hidden[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("nhl,ld->nhd", weights, kv[:, :KV_LORA_RANK].float()) * scales.kv_scale
    return out, lse


class DenseTorchBackend(Backend):
    """Dense attention in fp32 on the CPU; takes bf16 or fp8 (either e4m3 flavour) q and KV."""

    name: ClassVar[str] = "dense_torch"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL
    plan_format: ClassVar[str | None] = None
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = (
        torch.bfloat16,
        torch.float8_e4m3fn,
        torch.float8_e4m3fnuz,
    )
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = q_dtypes
    numerics: ClassVar[str] = "fp32-reference"

    def builder_cls(self) -> type[MetadataBuilder]:
        """The suite's shared builder, without a work plan."""
        return PlanFreeBuilder

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, heads = q.shape[0], q.shape[1]
        out = torch.zeros((tokens, heads, KV_LORA_RANK))
        lse = torch.full((tokens, heads), float("-inf"))
        qsl = decode.query_start_loc_cpu.tolist()
        for request in range(decode.num_requests):  # padded rows have no CSR entry
            q0, q1 = qsl[request], qsl[request + 1]
            kv = request_kv(kv_cache, decode, request)
            if q1 > q0 and kv.shape[0]:
                out[q0:q1], lse[q0:q1] = attend(q[q0:q1], kv, causal=decode.causal, scales=scales)
        return out.to(torch.bfloat16), lse

    @property
    def device(self) -> torch.device:
        """Where its tensors live: the CPU."""
        return torch.device("cpu")

    def availability(self) -> Availability:
        """It needs nothing but torch, so it runs everywhere."""
        return Availability(True)
