"""The implementations timed on every case: the suite's decode ("ours") and in-repo peers.

- ``triton``: `kernels.triton_mla.persistent_mla_decode` (decode + reduce) over the suite
  planner's ``triton`` plan, as the CUDA backend runs it (one program per SM);
- ``baseline``: the classic two-stage split-KV decode (`benchmarks.baseline_split_kv`), given
  the dequantised bf16 q; it dequantises an fp8 cache on load;
- ``sdpa``: torch's ``scaled_dot_product_attention`` over the gathered (dense) cache, a
  dequantised bf16 copy for fp8.

Each factory returns an `Impl`: the call to time, how to read (out, lse) from its result, and
facts for the record. FlashInfer's peer lives in `benchmarks.decode.flashinfer_peer`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any

from benchmarks.decode.cases import PAGE_SIZE, SM_SCALE
from benchmarks.decode.inputs import Batch


def _as_pair(result: Any) -> tuple[Any, Any]:
    return result


@dataclasses.dataclass
class Impl:
    """One implementation on one batch."""

    run: Callable[[], Any]  # the timed call (outputs preallocated)
    outputs: Callable[[Any], tuple[Any, Any]] = _as_pair  # run()'s result -> (out, lse or None)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


def plan_for(
    batch: Batch, num_sms: int, device: str = "cuda", plan_heads: int | None = None
) -> Any:
    """The suite planner's ``triton`` plan of the batch (CPU), one program per SM.

    `plan_heads` plans for that many heads instead of all of them (the kernel then runs the
    plan once per group of heads).
    """
    import torch

    from conformance.persistent import plan_persistent_decode
    from conformance.persistent.profiles import get_profile

    case = batch.case
    return plan_persistent_decode(
        batch.qo_indptr_cpu,
        batch.kv_indptr_cpu,
        batch.kv_last_page_lens_cpu,
        num_heads_q=plan_heads or case.heads,
        max_seqlen_qo=case.q_len,
        uni_seqlen_qo=case.q_len,
        page_size=PAGE_SIZE,
        kv_granularity=get_profile("triton").default_kv_granularity(PAGE_SIZE),  # as the backend
        causal=True,
        max_split_per_batch=-1,
        q_dtype=batch.q.dtype,
        kv_dtype=batch.kv_cache.dtype,
        arch="triton",
        num_cus=num_sms,
    ).to(torch.device(device))


def triton_impl(batch: Batch, plan: Any, config: dict[str, int] | None = None) -> Impl:
    """The suite's persistent decode over `plan`, into preallocated outputs."""
    from kernels.triton_mla import persistent_mla_decode

    out, lse = batch.empty_outputs()

    def run() -> Any:
        return persistent_mla_decode(
            batch.q, batch.kv_cache, plan, **batch.paged_kwargs(), page_size=PAGE_SIZE,
            sm_scale=SM_SCALE, q_scale=batch.q_scale, kv_scale=batch.kv_scale, causal=True,
            out=out, lse=lse, config=config,
        )  # fmt: skip

    return Impl(run)


def baseline_impl(batch: Batch, num_sms: int) -> Impl:
    """The two-stage split-KV baseline, with its split count in `info`."""
    from benchmarks import baseline_split_kv as base

    case = batch.case
    rows = case.batch * case.q_len
    splits = base.default_num_splits(
        batch_rows=rows, num_heads=case.heads, max_seq_len=case.context, num_sms=num_sms
    )
    seq_rows = base.row_seq_lens(batch.seq_lens, case.q_len)
    scratch = base.split_kv_scratch(rows, case.heads, splits, batch.q.device)
    out, lse = batch.empty_outputs()

    def run() -> Any:
        return base.split_kv_decode(
            batch.q_bf16, batch.kv_cache, batch.block_table, seq_rows, q_len=case.q_len,
            sm_scale=SM_SCALE, num_splits=splits, k_scale=batch.kv_scale, scratch=scratch,
            out=out, lse=lse,
        )  # fmt: skip

    return Impl(run, info={"num_splits": splits})


def sdpa_impl(batch: Batch) -> Impl:
    """Torch SDPA over the gathered dense cache, with the SDPA backend it uses in `info`.

    Heads become query positions of one KV head (MQA folded into M): q ``[B, 1, s·H, 576]``,
    K ``[B, 1, L, 576]``, V the first 512 columns of K, an explicit causal mask when s > 1.
    The gather (and, for fp8, the dequantisation) is done once outside the timed region.
    """
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    case = batch.case
    B, s, H, L = case.batch, case.q_len, case.heads, case.context
    pages = math.ceil(L / PAGE_SIZE)
    table = batch.block_table[:, :pages].long()
    dense = batch.kv_cache[table].reshape(B, pages * PAGE_SIZE, 576)[:, :L]
    if dense.dtype != torch.bfloat16:
        dense = (dense.to(torch.bfloat16) * batch.kv_scale).to(torch.bfloat16)
    k = dense.unsqueeze(1)
    del dense
    v = k[..., :512]
    q = batch.q_bf16.reshape(B, s * H, 576).unsqueeze(1)
    mask = None
    if s > 1:
        pos = torch.arange(L, device=q.device)
        token = torch.arange(s, device=q.device).repeat_interleave(H)
        mask = (pos[None, :] <= (L - s + token)[:, None])[None, None]

    def outputs(result: Any) -> tuple[Any, Any]:
        return result.squeeze(1).reshape(B * s, H, 512), None

    for backend in (
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH,
    ):

        def run(backend: Any = backend) -> Any:
            with sdpa_kernel([backend]):
                return sdpa(q, k, v, attn_mask=mask, scale=SM_SCALE)

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # each rejected backend warns why
                run()
            if q.is_cuda:
                torch.cuda.synchronize()
        except RuntimeError:
            continue
        return Impl(run, outputs, {"backend": backend.name})
    raise RuntimeError("no SDPA backend accepted the case")
