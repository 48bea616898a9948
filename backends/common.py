"""The MLA metadata builder all backends share (vLLM's MLACommonMetadataBuilder, reduced).

It reads the MLA dims and the prefill backend from the first layer in the
`static_forward_context` (vLLM #51255), sizes its chunked-prefill workspace as
``kv_lora_rank + qk_rope_head_dim``, splits decodes from prefills, turns the decode
rows into a paged CSR list and plans the persistent decode (`PlanFreeBuilder`: no plan).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch

from backends.base import (
    AITER_V1,
    Backend,
    BuilderConfig,
    ChunkedContext,
    DecodeMetadata,
    MetadataBuilder,
    MLAMetadata,
    PrefillMetadata,
)
from conformance.errors import MetadataError
from conformance.metadata.batch import split_decodes_and_prefills
from conformance.metadata.dims import MLADims
from conformance.metadata.record import CommonAttentionMetadata
from conformance.metadata.transforms import decode_view, prefill_view
from conformance.metadata.validator import validate
from conformance.persistent.planner import plan_persistent_decode
from conformance.persistent.profiles import get_profile
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

WORKSPACE_MAX_TOKENS = 64 * 1024
ALL_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def chunked_prefill_workspace_tokens(config: BuilderConfig) -> int:
    """Rows of the chunked-prefill workspace (vLLM's sizing rule)."""
    block = config.kv_cache.block_size
    size = min(max(8 * config.max_model_len, 4 * config.max_num_seqs * block), WORKSPACE_MAX_TOKENS)
    return max(size, config.max_num_seqs * block)


def paged_csr(
    block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(kv_indptr, kv_indices, kv_last_page_lens)`` of the pages each request uses."""
    seq = seq_lens.cpu().to(torch.int64)
    pages = (seq + page_size - 1) // page_size
    indptr = torch.zeros(seq.numel() + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(pages, 0)
    table = block_table.cpu()
    indices = [table[r, : int(pages[r])] for r in range(seq.numel())]
    flat = torch.cat(indices) if indices else torch.empty(0, dtype=torch.int32)
    last = torch.where(seq > 0, seq - (pages - 1) * page_size, torch.zeros_like(seq))
    return indptr.to(torch.int32), flat.to(torch.int32), last.to(torch.int32)


def carried(cam: CommonAttentionMetadata, *fields: str) -> dict[str, Any]:
    """The named fields of `cam`, as keywords of the metadata that carries them unchanged."""
    return {name: getattr(cam, name) for name in fields}


class MLACommonBuilder(MetadataBuilder):
    """Shared builder; a backend subclasses it to name its planner profile."""

    default_arch: ClassVar[str] = "gfx942"
    default_num_cus: ClassVar[int] = 8
    plans_work: ClassVar[bool] = True
    """Whether it attaches an AITER v1 work plan to its decode metadata."""

    def __init__(
        self,
        config: BuilderConfig,
        layer_names: list[str],
        static_forward_context: Mapping[str, Any],
    ) -> None:
        if not layer_names:
            raise ValueError("layer_names: expected at least one layer name, found none")
        try:
            layer = static_forward_context[layer_names[0]]
        except KeyError:
            raise KeyError(
                f"static_forward_context has no layer {layer_names[0]!r}; "
                f"registered: {sorted(static_forward_context)}"
            ) from None
        self.config = config
        self.device = torch.device(config.device)
        self._prefill_backend = layer.prefill_backend.clone()
        self.mla_dims = MLADims(
            q_lora_rank=layer.q_lora_rank,
            kv_lora_rank=layer.kv_lora_rank,
            qk_nope_head_dim=layer.qk_nope_head_dim,
            qk_rope_head_dim=layer.qk_rope_head_dim,
            v_head_dim=layer.v_head_dim,
        )
        self.head_dim = self.mla_dims.kv_lora_rank + self.mla_dims.qk_rope_head_dim
        self.workspace = torch.empty(
            (chunked_prefill_workspace_tokens(config), self.head_dim),
            dtype=config.kv_cache.dtype,
            device=self.device,
        )
        self.planner: Callable[..., Any] = self.make_planner()

    def make_planner(self) -> Callable[..., Any]:
        """The planner its decode plans are made with (the reference planner here)."""
        return plan_persistent_decode

    def build(self, cam: CommonAttentionMetadata) -> MLAMetadata:
        """Split decodes from prefills and build both parts."""
        threshold = self.config.decode_threshold
        spec = self.config.kv_cache
        validate(
            cam,
            decode_threshold=threshold,
            block_size=spec.block_size,
            num_blocks=spec.num_blocks,
            device=self.device,
        )
        nd, npf, ndt, npt = split_decodes_and_prefills(
            cam, threshold, require_uniform=threshold > 1
        )
        return MLAMetadata(
            **carried(
                cam,
                "num_reqs",
                "num_actual_tokens",
                "max_query_len",
                "max_seq_len",
                "query_start_loc",
                "slot_mapping",
            ),
            num_decodes=nd,
            num_decode_tokens=ndt,
            num_prefills=npf,
            num_prefill_tokens=npt,
            head_dim=self.head_dim,
            decode=self._build_decode(decode_view(cam, nd)) if nd else None,
            prefill=self._build_prefill(prefill_view(cam, nd)) if npf else None,
        )

    # -- prefill ---------------------------------------------------------------------

    def _build_prefill(self, cam: CommonAttentionMetadata) -> PrefillMetadata:
        if cam.seq_lens_cpu_upper_bound is None:
            raise MetadataError(
                "seq_lens_cpu_upper_bound", "a CPU tensor for the prefill rows", None
            )
        query_lens = cam.query_lens_cpu()
        context = cam.seq_lens_cpu_upper_bound.to(torch.int32) - query_lens
        chunked = self._chunk_context(context) if bool((context > 0).any()) else None
        meta = PrefillMetadata(
            num_prefills=cam.num_reqs,
            num_prefill_tokens=cam.num_actual_tokens,
            **carried(cam, "query_start_loc", "max_query_len", "seq_lens"),
            context_lens_cpu=context,
            block_table=cam.block_table_tensor,
            prefill_backend=self._prefill_backend,
            chunked_context=chunked,
        )
        self._prefill_backend.prepare_metadata(meta)
        return meta

    def _chunk_context(self, context: torch.Tensor) -> ChunkedContext:
        page = self.config.kv_cache.block_size
        rows = self.workspace.shape[0]
        with_context = int((context > 0).sum())
        chunk = (rows // with_context) // page * page
        if chunk < 1:
            raise MetadataError(
                "workspace", f">= {with_context} pages of {page} tokens", f"{rows} rows"
            )
        num_chunks = -(-int(context.max()) // chunk)
        starts = torch.arange(num_chunks, dtype=torch.int32)[:, None] * chunk
        ends = torch.minimum(context[None, :], starts + chunk)
        lens = (ends - starts).clamp(min=0).to(torch.int32)
        cu = torch.zeros((num_chunks, context.numel() + 1), dtype=torch.int32)
        cu[:, 1:] = torch.cumsum(lens, 1)
        if int(cu[:, -1].max()) > rows:
            raise MetadataError("workspace", f"chunks of at most {rows} tokens", cu[:, -1])
        return ChunkedContext(self.workspace, chunk, starts.expand_as(lens).clone(), lens, cu)

    # -- decode ----------------------------------------------------------------------

    def _build_decode(self, cam: CommonAttentionMetadata) -> DecodeMetadata:
        page = self.config.kv_cache.block_size
        query_lens = cam.query_lens_cpu()
        real = int((query_lens > 0).nonzero().max()) + 1 if bool((query_lens > 0).any()) else 0
        real_cam = cam if real == cam.num_reqs else decode_view(cam, real)
        kv_indptr, kv_indices, last = paged_csr(
            real_cam.block_table_tensor, real_cam.seq_lens, page
        )
        meta = DecodeMetadata(
            num_decodes=cam.num_reqs,
            num_decode_tokens=cam.num_actual_tokens,
            **carried(
                cam,
                "max_query_len",
                "max_seq_len",
                "query_start_loc",
                "query_start_loc_cpu",
                "seq_lens",
            ),
            block_table=cam.block_table_tensor,
            kv_indptr=kv_indptr.to(self.device),
            kv_indices=kv_indices.to(self.device),
            kv_last_page_lens=last.to(self.device),
            page_size=page,
            causal=cam.causal,
        )
        if real and self.plans_work:
            meta.planner_call = self._planner_call(real_cam, kv_indptr, last)
            meta.plan = self.planner(**meta.planner_call)
        return meta

    def _planner_call(
        self, cam: CommonAttentionMetadata, kv_indptr: torch.Tensor, last: torch.Tensor
    ) -> dict[str, Any]:
        query_lens = cam.query_lens_cpu()
        max_q = int(query_lens.max())
        uniform = bool((query_lens == max_q).all())
        page = self.config.kv_cache.block_size
        arch = self.config.arch or self.default_arch
        return {
            "qo_indptr": cam.query_start_loc_cpu,
            "kv_indptr": kv_indptr,
            "kv_last_page_lens": last,
            "num_heads_q": self.config.num_heads,
            "max_seqlen_qo": max_q,
            "uni_seqlen_qo": max_q if uniform else -1,
            "page_size": page,
            "kv_granularity": get_profile(arch).default_kv_granularity(page),
            "causal": cam.causal,
            "max_split_per_batch": self.config.max_split_per_batch,
            "q_dtype": self.config.q_dtype,
            "kv_dtype": self.config.kv_cache.dtype,
            "arch": arch,
            "num_cus": self.config.num_cus or self.default_num_cus,
        }


class PlanFreeBuilder(MLACommonBuilder):
    """The shared builder without a work plan: decode metadata of paged-KV CSR lists only.

    For a backend that schedules its own way (``plan_format = None``); a subclass attaches
    its own scheduler metadata (`DecodeMetadata.scheduler`) by `scheduler_metadata`.
    """

    plans_work: ClassVar[bool] = False

    def scheduler_metadata(self, decode: DecodeMetadata) -> Any:
        """The backend's own scheduler metadata of `decode` (None: it has none)."""
        return None

    def _build_decode(self, cam: CommonAttentionMetadata) -> DecodeMetadata:
        meta = super()._build_decode(cam)
        meta.scheduler = self.scheduler_metadata(meta)
        return meta


class PlanExecutingBackend(Backend):
    """The declaration of a backend over the shared builder that executes AITER v1 plans
    (bf16 or either e4m3 flavour for q and KV); subclasses add availability and decode."""

    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL
    plan_format: ClassVar[str | None] = AITER_V1
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = ALL_DTYPES
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = ALL_DTYPES
