"""``flashmla``: DeepSeek's FlashMLA dense decode, driven with the suite's own record.

A plan-free backend (FlashMLA schedules its own tiles). Its declaration is FlashMLA's
contract: 64-token pages (the suite re-lays other batches, `conformance.goldens.relayout`);
bf16 q over a bf16 cache (``dense_decode_fwd``), and e4m3 q over an e4m3 cache with
per-tensor descales (``fwd_kvcache_mla_fp8``) where the e4m3 extension is present; the same
query length in every request, causal across a request's query tokens; its own tile-scheduler
metadata, made once per batch: by the builder for the e4m3 path
(``get_mla_decoding_metadata_dense_fp8``), by the first decode of the batch for bf16.

FlashMLA's result is ``out [b, s_q, h, 512]`` and a natural-log ``lse [b, h, s_q]`` that is
+inf where a row sees no token; the suite's is ``[tokens, h]`` with −inf there
(`to_suite_lse`). Where the ops come from: `backends.flashmla.ops`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from backends.base import Availability, Backend, DecodeMetadata, DecodeScales, MetadataBuilder
from backends.common import PlanFreeBuilder
from backends.flashmla.ops import FlashMLAOps, NotFound, find_ops
from backends.triton_backend import cuda_device_count
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

HEAD_DIM = 576
HEAD_DIM_V = 512
PAGE_SIZE = 64
BF16, E4M3 = torch.bfloat16, torch.float8_e4m3fn


@dataclass
class FlashMLASchedule:
    """FlashMLA's inputs for one batch: block table, kv lengths and its tile schedule."""

    block_table: torch.Tensor
    """int32 ``[b, max_pages]``: the requests' pages (padded rows excluded)."""
    cache_seqlens: torch.Tensor
    """int32 ``[b]``: kv tokens of each request."""
    q_len: int
    num_heads: int
    causal: bool
    fp8: bool
    tile_scheduler_metadata: torch.Tensor | None = None
    """FlashMLA's schedule (None until made: by the builder for e4m3, the first call for bf16)."""
    num_splits: torch.Tensor | None = None
    descales: dict[tuple[float, float], tuple[torch.Tensor, torch.Tensor]] = field(
        default_factory=dict
    )
    """The e4m3 path's ``(descale_q, descale_k)`` device tensors by value: made by the first
    decode of the batch, so that a CUDA graph captured after it copies nothing."""

    def descale(self, q_scale: float, kv_scale: float, device: torch.device) -> list[torch.Tensor]:
        """``[descale_q, descale_k]`` as FlashMLA takes them: float32 ``[1]`` on the device."""
        key = (q_scale, kv_scale)
        if key not in self.descales:
            self.descales[key] = tuple(  # type: ignore[assignment]
                torch.tensor([s], dtype=torch.float32, device=device) for s in key
            )
        return list(self.descales[key])

    @property
    def batch(self) -> int:
        return int(self.cache_seqlens.numel())


def uniform_query_len(decode: DecodeMetadata) -> int:
    """The query length every request of `decode` has; ValueError naming a request that
    differs (FlashMLA takes ``q`` as ``[b, s_q, h, d]``)."""
    starts = decode.query_start_loc_cpu[: decode.num_requests + 1].to(torch.int64)
    lens = (starts[1:] - starts[:-1]).tolist()
    for row, n in enumerate(lens):
        if n != decode.max_query_len:
            raise ValueError(
                f"flashmla: query_start_loc gives request {row} {n} query tokens, expected "
                f"{decode.max_query_len} (FlashMLA takes the same query length in every request)"
            )
    return int(decode.max_query_len)


def schedule_for(
    decode: DecodeMetadata, *, num_heads: int, fp8: bool, ops: FlashMLAOps | None
) -> FlashMLASchedule:
    """The schedule of `decode`'s real requests; the e4m3 tile schedule made here, once."""
    batch = decode.num_requests
    schedule = FlashMLASchedule(
        block_table=decode.block_table[:batch].to(torch.int32).contiguous(),
        cache_seqlens=decode.seq_lens[:batch].to(torch.int32).contiguous(),
        q_len=uniform_query_len(decode),
        num_heads=num_heads,
        causal=decode.causal,
        fp8=fp8,
    )
    if fp8 and ops is not None and ops.fp8 is not None:
        metadata, splits = ops.fp8.get_mla_decoding_metadata_dense_fp8(
            schedule.cache_seqlens, schedule.q_len * num_heads, 1
        )
        schedule.tile_scheduler_metadata, schedule.num_splits = metadata, splits
    return schedule


def to_suite_lse(lse: torch.Tensor) -> torch.Tensor:
    """FlashMLA's ``[b, h, s_q]`` LSE (+inf: no token seen) as ``[b * s_q, h]`` (−inf)."""
    flat = lse.float().transpose(1, 2).reshape(-1, lse.shape[1])
    return torch.where(torch.isposinf(flat), torch.full_like(flat, float("-inf")), flat)


def _ops_or_none() -> FlashMLAOps | None:
    found = find_ops()
    return found if isinstance(found, FlashMLAOps) else None


class FlashMLABuilder(PlanFreeBuilder):
    """The shared builder; attaches a `FlashMLASchedule` to the decode metadata."""

    def scheduler_metadata(self, decode: DecodeMetadata) -> FlashMLASchedule:
        return schedule_for(
            decode,
            num_heads=self.config.num_heads,
            fp8=self.config.kv_cache.dtype == E4M3,
            ops=_ops_or_none(),
        )


class FlashMLABackend(Backend):
    """DeepSeek's FlashMLA dense decode on a Hopper GPU."""

    name: ClassVar[str] = "flashmla"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL
    plan_format: ClassVar[str | None] = None
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = (BF16, E4M3)
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = (BF16, E4M3)
    dtype_pairs: ClassVar[tuple[tuple[torch.dtype, torch.dtype], ...] | None] = (
        (BF16, BF16),
        (E4M3, E4M3),
    )
    page_sizes: ClassVar[tuple[int, ...] | None] = (PAGE_SIZE,)
    numerics: ClassVar[str] = "tensor-core"

    def __init__(self) -> None:
        ops = _ops_or_none()
        if ops is not None and ops.fp8 is None:  # no e4m3 extension: bf16 alone
            self.q_dtypes = self.kv_dtypes = (BF16,)
            self.dtype_pairs = ((BF16, BF16),)

    def ops(self) -> FlashMLAOps:
        """The ops found (`backends.flashmla.ops`); RuntimeError with the reason if none."""
        found = find_ops()
        if isinstance(found, NotFound):
            raise RuntimeError(f"flashmla: {found.reason}")
        return found

    def availability(self) -> Availability:
        found = find_ops()
        if isinstance(found, NotFound):
            return Availability(False, found.reason)
        if torch.version.hip is not None or not torch.cuda.is_available():
            return Availability(False, f"no CUDA device: torch {torch.__version__}")
        major, minor = torch.cuda.get_device_capability()
        if major != 9:
            return Availability(
                False,
                f"FlashMLA's dense decode runs on Hopper (sm_90) only, as vLLM gates it; "
                f"this GPU is sm_{major}{minor}",
            )
        return Availability(True)

    def provenance(self) -> dict[str, str]:
        found = find_ops()
        return found.provenance() if isinstance(found, FlashMLAOps) else {}

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device() if cuda_device_count() else 0)

    def builder_cls(self) -> type[MetadataBuilder]:
        return FlashMLABuilder

    def check_inputs(self, q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
        """Whether the pair is e4m3; ValueError naming a pair or page size it does not take."""
        pair = (q.dtype, kv_cache.dtype)
        if pair not in (self.dtype_pairs or ()):
            raise ValueError(
                f"flashmla: q {q.dtype} over cache {kv_cache.dtype}: expected one of "
                f"{[f'{a}/{b}' for a, b in self.dtype_pairs or ()]}"
            )
        if kv_cache.shape[1] != PAGE_SIZE:
            raise ValueError(
                f"flashmla: a cache of {kv_cache.shape[1]}-token pages, expected {PAGE_SIZE}"
            )
        return q.dtype == E4M3

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q ``[T, H, 576]``, cache ``[pages, 64, 576]`` → out ``[T, H, 512]`` bf16 and
        natural-log LSE ``[T, H]`` fp32."""
        fp8 = self.check_inputs(q, kv_cache)
        ops = self.ops()
        schedule = decode.scheduler
        if not isinstance(schedule, FlashMLASchedule):  # metadata fed without a schedule
            schedule = schedule_for(decode, num_heads=q.shape[1], fp8=fp8, ops=ops)
            decode.scheduler = schedule
        if schedule.fp8 != fp8 or schedule.num_heads != q.shape[1]:
            raise ValueError(
                f"flashmla: the schedule was made for {schedule.num_heads} heads, "
                f"{'e4m3' if schedule.fp8 else 'bf16'}; the decode has {q.shape[1]} heads, "
                f"{q.dtype}"
            )
        out, lse = self.run(ops, q, kv_cache, schedule, scales)
        tokens, heads = schedule.batch * schedule.q_len, q.shape[1]
        full_out = q.new_zeros((q.shape[0], heads, HEAD_DIM_V), dtype=torch.bfloat16)
        full_lse = torch.full((q.shape[0], heads), float("-inf"), device=q.device)
        full_out[:tokens] = out.reshape(tokens, heads, HEAD_DIM_V).to(torch.bfloat16)
        full_lse[:tokens] = to_suite_lse(lse)
        return full_out, full_lse

    def run(
        self,
        ops: FlashMLAOps,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        schedule: FlashMLASchedule,
        scales: DecodeScales,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One FlashMLA call: ``(out [b, s_q, h, 512], lse [b, h, s_q])``."""
        b, s_q, heads = schedule.batch, schedule.q_len, q.shape[1]
        q4 = q[: b * s_q].reshape(b, s_q, heads, HEAD_DIM).contiguous()
        k_cache = kv_cache.unsqueeze(-2)  # [pages, 64, 1 kv head, 576]
        if schedule.fp8:
            assert ops.fp8 is not None  # the declaration excludes e4m3 without the extension
            descale = schedule.descale(scales.q_scale, scales.kv_scale, q.device)
            return ops.fp8.fwd_kvcache_mla_fp8(
                q4, k_cache, HEAD_DIM_V, schedule.cache_seqlens, schedule.block_table,
                scales.sm_scale, schedule.causal, schedule.tile_scheduler_metadata,
                schedule.num_splits, *descale,
            )  # fmt: skip
        # A bf16 cache takes no kernel scale: its scale goes into the scores and the output.
        sm_scale = scales.sm_scale * scales.q_scale * scales.kv_scale
        out, lse, metadata, splits = ops.dense.dense_decode_fwd(
            q4, k_cache, HEAD_DIM_V, schedule.cache_seqlens, schedule.block_table, sm_scale,
            schedule.causal, schedule.tile_scheduler_metadata, schedule.num_splits, None,
        )  # fmt: skip
        schedule.tile_scheduler_metadata, schedule.num_splits = metadata, splits
        return out * scales.kv_scale if scales.kv_scale != 1.0 else out, lse
