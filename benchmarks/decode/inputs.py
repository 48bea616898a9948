"""Device inputs of one case, in the layouts every implementation needs, and the fp32 reference.

Inputs are random (q ~ N(0, 1) clamped to ±4, cache ~ N(0, 0.1) clamped to ±1), pages randomly
permuted (`benchmarks.metadata_runner.build_decode_metadata`, a CAM construction site), every
slot past a sequence and the never-referenced page 0 NaN. fp8 cases hold e4m3 q and e4m3 KV
with per-tensor scales (AITER's fp8 decode) and the exactly dequantised bf16 q for the peers
that take bf16 q.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from benchmarks.decode.cases import KV_SCALE_FP8, PAGE_SIZE, Q_SCALE_FP8, SM_SCALE, Case

PAGED_FIELDS = ("kv_indptr", "kv_indices", "kv_last_page_lens", "qo_indptr")


@dataclasses.dataclass
class Batch:
    """Device inputs of one case, in the layouts every implementation needs."""

    case: Case
    q: Any  # [B·s, H, 576], bf16 or e4m3
    q_bf16: Any  # dequantised q for the baseline and SDPA
    kv_cache: Any  # [blocks, 64, 576], bf16 or e4m3
    block_table: Any  # [B, pages] int32 (device)
    seq_lens: Any  # [B] int32 (device)
    qo_indptr: Any  # [B + 1] int32 (device)
    qo_indptr_cpu: Any
    kv_indptr: Any  # [B + 1] int32 (device) and the CPU copies the planner takes
    kv_indptr_cpu: Any
    kv_indices: Any
    kv_last_page_lens: Any
    kv_last_page_lens_cpu: Any
    q_scale: float
    kv_scale: float

    def paged_kwargs(self) -> dict[str, Any]:
        """The paged-KV keyword arguments of `kernels.triton_mla.persistent_mla_decode`."""
        return {name: getattr(self, name) for name in PAGED_FIELDS}

    def empty_outputs(self) -> tuple[Any, Any]:
        """Preallocated (out ``[rows, H, 512]`` bf16, lse ``[rows, H]`` fp32)."""
        import torch

        rows, heads = self.q.shape[:2]
        out = torch.empty(rows, heads, 512, dtype=torch.bfloat16, device=self.q.device)
        return out, torch.empty(rows, heads, dtype=torch.float32, device=self.q.device)


def make_batch(case: Case, device: Any, seed: int = 0) -> Batch:
    """Random inputs built from a CAM (`build_decode_metadata`), slack slots NaN-poisoned."""
    import torch

    from backends.common import paged_csr
    from benchmarks.metadata_runner import build_decode_metadata

    cam = build_decode_metadata(
        [case.context] * case.batch,
        query_len=case.q_len,
        block_size=PAGE_SIZE,
        device=device,
        seed=seed,
    )
    kv_indptr, kv_indices, last = paged_csr(cam.block_table_tensor, cam.seq_lens, PAGE_SIZE)
    num_blocks = int(kv_indices.max()) + 1  # page 0 is never used: it stays NaN
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    fp8 = case.kv_format == "fp8"
    kv_scale = KV_SCALE_FP8 if fp8 else 1.0
    q_scale = Q_SCALE_FP8 if fp8 else 1.0
    cache = torch.empty(num_blocks, PAGE_SIZE, 576, dtype=torch.bfloat16, device=device)
    cache.normal_(0.0, 0.1 / kv_scale, generator=gen)
    cache.clamp_(-1.0 / kv_scale, 1.0 / kv_scale)
    cache[0] = float("nan")
    last_len = case.context - (math.ceil(case.context / PAGE_SIZE) - 1) * PAGE_SIZE
    if last_len < PAGE_SIZE:
        last_pages = cam.block_table_tensor[:, math.ceil(case.context / PAGE_SIZE) - 1].long()
        cache[last_pages, last_len:] = float("nan")
    if fp8:
        cache = cache.to(torch.float8_e4m3fn)
    q = torch.randn(case.batch * case.q_len, case.heads, 576, device=device, generator=gen)
    q = q.clamp_(-4.0, 4.0)
    if fp8:
        q8 = (q / q_scale).to(torch.float8_e4m3fn)
        q_bf16 = (q8.float() * q_scale).to(torch.bfloat16)  # exact: e4m3 · 2⁻² fits bf16
        q = q8
    else:
        q = q.to(torch.bfloat16)
        q_bf16 = q
    on_device = {"kv_indptr": kv_indptr, "kv_indices": kv_indices, "kv_last_page_lens": last}
    return Batch(
        case=case, q=q, q_bf16=q_bf16, kv_cache=cache, q_scale=q_scale, kv_scale=kv_scale,
        block_table=cam.block_table_tensor, seq_lens=cam.seq_lens, qo_indptr=cam.query_start_loc,
        qo_indptr_cpu=cam.query_start_loc_cpu, kv_indptr_cpu=kv_indptr, kv_last_page_lens_cpu=last,
        **{name: t.to(device) for name, t in on_device.items()},
    )  # fmt: skip


def reference_rows(batch: Batch, requests: Sequence[int]) -> tuple[Any, Any, Any]:
    """fp32 decode of `requests` from the dequantised inputs: (row ids, out, lse)."""
    import torch

    case = batch.case
    s, L = case.q_len, case.context
    rows, outs, lses = [], [], []
    pos = torch.arange(L, device=batch.q.device)
    for b in requests:
        table = batch.block_table[b, : math.ceil(L / PAGE_SIZE)].long()
        kv = batch.kv_cache[table[pos // PAGE_SIZE], pos % PAGE_SIZE].float() * batch.kv_scale
        q = batch.q[b * s : (b + 1) * s].float() * batch.q_scale  # [s, H, 576]
        scores = torch.einsum("shd,ld->shl", q, kv) * SM_SCALE
        last = L - s + torch.arange(s, device=q.device)
        scores = scores.masked_fill(pos[None, None, :] > last[:, None, None], float("-inf"))
        lses.append(torch.logsumexp(scores, -1))
        outs.append(torch.softmax(scores, -1) @ kv[:, :512])
        rows += list(range(b * s, (b + 1) * s))
    return torch.tensor(rows, device=batch.q.device), torch.cat(outs), torch.cat(lses)
