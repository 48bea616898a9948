"""The `Backend` interface every MLA backend implements, and the records it exchanges."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch

from conformance.applicability import (
    AITER_V1,
    Declaration,
    dtype_label,
    dtype_reason,
    plan_reason,
)
from conformance.metadata.dims import DEEPSEEK_R1, ModelConfig
from conformance.metadata.record import CommonAttentionMetadata
from conformance.numerics.fp8 import is_fp8
from conformance.persistent.plan import WorkPlan
from conformance.targets import BUILTIN_TARGETS, DEVICE_KINDS

PLAN_FORMATS: tuple[str, ...] = (AITER_V1,)
TARGET_FACTS: tuple[str, ...] = ("device_kind", "behaviour_files", "environment")
"""Class attributes a plug-in declares itself; a built-in backend's are its targets entry."""


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; `reason` says why not."""

    available: bool
    reason: str = ""


@dataclass(frozen=True)
class KVCacheSpec:
    """The paged latent KV cache a builder plans for."""

    block_size: int
    dtype: torch.dtype = torch.bfloat16
    head_size: int = 576
    num_blocks: int | None = None
    """Blocks in the cache, the null block included; None: not known (ids bounded below only)."""


@dataclass(frozen=True)
class BuilderConfig:
    """What a metadata builder is constructed with (vLLM's vllm_config, reduced)."""

    model: ModelConfig = DEEPSEEK_R1
    num_heads: int = 16
    kv_cache: KVCacheSpec = KVCacheSpec(block_size=1)
    q_dtype: torch.dtype = torch.bfloat16
    max_num_seqs: int = 256
    max_model_len: int = 8192
    decode_threshold: int = 1
    device: str = "cpu"
    # Persistent-decode planning: planner profile and program count (None: the backend's).
    arch: str | None = None
    num_cus: int | None = None
    max_split_per_batch: int = -1


@dataclass
class ChunkedContext:
    """Chunks of prefill context that fit the builder's workspace."""

    workspace: torch.Tensor
    chunk_size: int
    starts: torch.Tensor
    """int32 [num_chunks, num_prefills]: first context token of each chunk."""
    seq_lens: torch.Tensor
    """int32 [num_chunks, num_prefills]: tokens of each chunk."""
    cu_seq_lens: torch.Tensor
    """int32 [num_chunks, num_prefills + 1]: prefix sums of `seq_lens`."""


@dataclass
class PrefillMetadata:
    """The prefill rows of a batch."""

    num_prefills: int
    num_prefill_tokens: int
    query_start_loc: torch.Tensor
    max_query_len: int
    seq_lens: torch.Tensor
    context_lens_cpu: torch.Tensor
    block_table: torch.Tensor
    prefill_backend: Any
    chunked_context: ChunkedContext | None = None


@dataclass
class DecodeMetadata:
    """The decode rows of a batch, with the paged-KV CSR lists and the work plan.

    **Padded rows.** A batch may end in padded rows (CUDA-graph padding: query length 0,
    kv length 0). They count in `num_decodes` and in the per-row fields (`query_start_loc`,
    `seq_lens`, `block_table`), but the paged-KV CSR lists (`kv_indptr`, `kv_indices`,
    `kv_last_page_lens`) stop at the last row with a query token: they describe
    `num_requests` requests, and ``num_requests <= num_decodes``. Loop over
    ``range(decode.num_requests)`` when reading the CSR lists; rows from `num_requests` on
    have no query token and produce no output.
    """

    num_decodes: int
    """Decode rows, padded rows included."""
    num_decode_tokens: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor
    """int32 [num_decodes + 1]: query token offsets of every row (padded rows: empty)."""
    query_start_loc_cpu: torch.Tensor
    """`query_start_loc` on the CPU."""
    seq_lens: torch.Tensor
    """int32 [num_decodes]: kv tokens of every row, new ones included (padded rows: 0)."""
    block_table: torch.Tensor
    """int32 [num_decodes, max_blocks]: pages of every row (CAM style)."""
    kv_indptr: torch.Tensor
    """int32 [num_requests + 1]: prefix sums of pages per request (padded rows excluded)."""
    kv_indices: torch.Tensor
    """int32 [total pages]: physical page ids, request after request."""
    kv_last_page_lens: torch.Tensor
    """int32 [num_requests]: valid tokens in each request's last page."""
    page_size: int
    causal: bool = True
    """Causal mask across the query tokens of each request."""
    plan: WorkPlan | None = None
    """The AITER v1 work plan (backends declaring ``plan_format = "aiter-v1"``)."""
    planner_call: dict[str, Any] = field(default_factory=dict)
    """The exact arguments given to the planner (for differential replay)."""
    scheduler: Any = None
    """A plan-free backend's own scheduler metadata (FlashInfer's planned wrapper, say)."""

    @property
    def num_requests(self) -> int:
        """Requests the CSR lists describe: `num_decodes` minus the trailing padded rows."""
        return int(self.kv_indptr.numel()) - 1

    @property
    def num_padded_rows(self) -> int:
        """Trailing padded rows: rows past the CSR lists (query length 0, no output)."""
        return self.num_decodes - self.num_requests


@dataclass(frozen=True)
class DecodeScales:
    """The softmax scale and the per-tensor dequantisation scales of q and the cache."""

    sm_scale: float
    q_scale: float = 1.0
    kv_scale: float = 1.0

    def as_kwargs(self) -> dict[str, float]:
        """``sm_scale``, ``q_scale`` and ``kv_scale`` as keyword arguments."""
        return {"sm_scale": self.sm_scale, "q_scale": self.q_scale, "kv_scale": self.kv_scale}


def csr_arguments(decode: DecodeMetadata) -> dict[str, Any]:
    """The paged-KV CSR lists and mask of `decode` as keyword arguments of a kernel."""
    return {
        "kv_indptr": decode.kv_indptr,
        "kv_indices": decode.kv_indices,
        "kv_last_page_lens": decode.kv_last_page_lens,
        "page_size": decode.page_size,
        "causal": decode.causal,
    }


def require_plan(decode: DecodeMetadata) -> WorkPlan:
    """The work plan of `decode`; a clear error when the batch had no decode rows."""
    if decode.plan is None:
        raise ValueError("decode.plan: expected a work plan, found None (no decode rows?)")
    return decode.plan


@dataclass
class MLAMetadata:
    """What a builder's `build()` returns."""

    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor
    slot_mapping: torch.Tensor
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    num_prefill_tokens: int
    head_dim: int
    decode: DecodeMetadata | None = None
    prefill: PrefillMetadata | None = None


class MetadataBuilder(ABC):
    """Turns a `CommonAttentionMetadata` into backend metadata."""

    @abstractmethod
    def __init__(
        self,
        config: BuilderConfig,
        layer_names: list[str],
        static_forward_context: Mapping[str, Any],
    ) -> None: ...

    @abstractmethod
    def build(self, cam: CommonAttentionMetadata) -> MLAMetadata:
        """Build the metadata of one batch."""


class Backend(ABC):
    """One MLA backend: availability, metadata builder, planner and decode.

    What it is, declared once (the defaults fit a plan-free backend):

    - ``plan_format``: ``"aiter-v1"`` when its builder makes, and its decode executes,
      AITER v1 work plans (the plan contract applies); None when it schedules its own way;
    - ``q_dtypes`` / ``kv_dtypes``: the q and paged-cache dtypes its decode takes (fp8 with a
      per-tensor scale); golden cases of other dtypes are not applicable to it;
    - ``numerics``: how its decode computes, which selects its tolerance.
    """

    name: ClassVar[str]
    layer_protocol: ClassVar[frozenset[str]]
    """Dotted attribute paths its builder reads from layer objects."""
    plan_format: ClassVar[str | None] = None
    """``"aiter-v1"`` or None (plan-free: the plan contract does not apply)."""
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16,)
    """q dtypes its decode takes."""
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16,)
    """Paged-cache dtypes its decode takes (fp8: per-tensor ``kv_scale``)."""
    dtype_pairs: ClassVar[tuple[tuple[torch.dtype, torch.dtype], ...] | None] = None
    """The (q, cache) dtype pairs its decode takes, where not every pair of ``q_dtypes`` x
    ``kv_dtypes`` is (FlashMLA: bf16 over bf16 and e4m3 over e4m3 only); None: every pair."""
    page_sizes: ClassVar[tuple[int, ...] | None] = None
    """The only page sizes its kernel reads (a plan-free backend; FlashMLA: 64); the suite
    re-lays a golden batch of another page size into the first. None: any page size."""
    numerics: ClassVar[str] = "fp32-reference"
    """How its decode computes: ``fp32-reference``, ``tensor-core`` (bf16 dot operands) or
    ``dequant-bf16`` (fp8 KV dequantised to bf16 before the dots); selects the tolerance
    (conformance/numerics/tolerances.py)."""
    tiny_cases_only: ClassVar[bool] = False
    """Run only the golden cases marked tiny (an interpreter is slow)."""

    # A plug-in's target facts (`conformance.targets.plugin_target` reads them). A built-in
    # backend declares them in its `conformance.targets` entry instead, never here; either is
    # read through `conformance.targets` (`declared`, `device_of`), never from the class.
    device_kind: ClassVar[str | None] = None
    """The kind of device its decode needs: ``cpu`` (None: cpu), ``cuda``, ``rocm`` or another
    of `conformance.targets.DEVICE_KINDS`; the sign-off checks every run's provenance
    against it."""
    behaviour_files: ClassVar[tuple[str, ...]] = ()
    """Glob patterns, relative to the repository, of the files that decide its behaviour (its
    evidence fingerprint)."""
    environment: ClassVar[Mapping[str, str]] = {}
    """Variables its runs set (if unset) before its tests run."""

    def declaration(self) -> str:
        """The declaration in words, e.g. ``plan_format=None, q_dtypes=(bf16), ...``."""
        return Declaration.of(self).words()

    def plan_contract_skip(self) -> str | None:
        """Why the plan contract does not apply (None: it applies)."""
        return plan_reason(Declaration.of(self))

    def dtype_skip(self, q_dtype: torch.dtype, kv_dtype: torch.dtype) -> str | None:
        """Why a batch of these dtypes is not applicable (None: the backend takes it)."""
        return dtype_reason(Declaration.of(self), dtype_label(q_dtype), dtype_label(kv_dtype))

    def check_declaration(self) -> list[str]:
        """Problems of the declaration itself (empty when it is valid)."""
        problems = []
        if not re.fullmatch(r"[A-Za-z0-9_.]+", getattr(self, "name", "")):
            problems.append("name: expected letters, digits, '_' and '.' (it names JUnit files)")
        if self.plan_format is not None and self.plan_format not in PLAN_FORMATS:
            problems.append(f"plan_format: expected None or one of {PLAN_FORMATS}")
        for name in ("q_dtypes", "kv_dtypes"):
            bad = [d for d in getattr(self, name) if d != torch.bfloat16 and not is_fp8(d)]
            if bad or not getattr(self, name):
                problems.append(f"{name}: expected bf16 or fp8 dtypes, found {bad or '()'}")
        if self.device_kind is not None and self.device_kind not in DEVICE_KINDS:
            problems.append(f"device_kind: expected one of {sorted(DEVICE_KINDS)}")
        if getattr(self, "name", None) in BUILTIN_TARGETS:
            problems += [
                f"{fact}: on the class; a built-in backend's is its conformance/targets.py entry"
                for fact in TARGET_FACTS
                if getattr(type(self), fact) != getattr(Backend, fact)
            ]
        if self.plan_format is not None and not self.plan_archs():
            problems.append(f"plan_archs: plan_format={self.plan_format} needs a profile")
        return problems

    @abstractmethod
    def availability(self) -> Availability:
        """Whether this backend can run here, and why not."""

    def provenance(self) -> dict[str, str]:
        """What its decode runs, for the run's sidecar (a library's version, where its
        binaries came from and their sha256); empty by default."""
        return {}

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """The torch device its tensors live on."""

    @abstractmethod
    def builder_cls(self) -> type[MetadataBuilder]:
        """The metadata builder class."""

    def plan_archs(self) -> tuple[str, ...]:
        """Planner profiles its builder can plan for (first: the default); none by default."""
        return ()

    def default_num_cus(self) -> int:
        """Persistent programs to plan for when the config gives none."""
        return 8

    def plan_cu_counts(self) -> tuple[int, ...] | None:
        """Program counts its builder can plan for; None: any (a device-bound planner
        such as AITER's plans only for the device's own count)."""
        return None

    def decode_archs(self) -> tuple[str, ...] | None:
        """Planner profiles whose plans its decode can execute; None: any plan."""
        return None

    def native_plan_check(self, decode: DecodeMetadata) -> list[str] | None:
        """Problems of a natively made plan against the reference planner (an empty
        list when it matches); None when the backend plans with the reference planner."""
        return None

    def decode(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        decode: DecodeMetadata,
        *,
        sm_scale: float,
        q_scale: float = 1.0,
        kv_scale: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode attention: q ``[T, H, 576]``, cache ``[blocks, page, 576]`` →
        output ``[T, H, 512]`` bf16 and natural-log LSE ``[T, H]`` fp32.

        Implement this, or `decode_scaled` (the same call with the scales in one record).
        """
        return self.decode_scaled(q, kv_cache, decode, DecodeScales(sm_scale, q_scale, kv_scale))

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`decode` with its scales as one `DecodeScales` record."""
        raise NotImplementedError(f"backend {self.name}: implement decode() or decode_scaled()")

    def make_builder(
        self,
        config: BuilderConfig,
        layer_names: list[str],
        static_forward_context: Mapping[str, Any],
    ) -> MetadataBuilder:
        """Construct this backend's builder; planner profile and program count default to
        the backend's own (a plan-free backend's builder gets no profile)."""
        archs = self.plan_archs() if self.plan_format else ()
        config = replace(
            config,
            arch=(config.arch or archs[0]) if archs else None,
            num_cus=config.num_cus or self.default_num_cus(),
        )
        return self.builder_cls()(config, layer_names, static_forward_context)
