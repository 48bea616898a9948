"""vLLM's own MLA decode as a suite backend: vLLM's builder, vLLM's cache layout, vLLM's kernel.

`VllmDecodeBackend` runs one of vLLM's MLA implementations (`IMPLEMENTATIONS`) the way
vLLM's `MLAAttention` layer calls it: the suite's batch becomes vLLM's own
`CommonAttentionMetadata`, vLLM's metadata builder of that backend builds it (with vLLM's
n-gram speculative config where a request has several query tokens, so a spec-as-decode
builder plans them as one decode), the implementation class is constructed as vLLM
constructs it, and ``impl.forward_mqa(q, kv_cache, metadata, layer)`` decodes over the
paged cache in vLLM's layout (``[blocks, page, 576]``; fp8 as vLLM's layer hands it over,
viewed as e4m3) with the per-tensor scales on the layer (``_q_scale``, ``_k_scale``). Its
declaration is the implementation's contract in vLLM: the q/cache dtype pairs vLLM feeds it
and the page sizes its kernel reads. The suite's judges (goldens, masking) then apply
unchanged. `Fault` injects the negative controls into the same path.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from backends.base import (
    Availability,
    Backend,
    BuilderConfig,
    DecodeMetadata,
    DecodeScales,
    MetadataBuilder,
    MLAMetadata,
)
from backends.common import PlanFreeBuilder
from backends.flashmla.backend import to_suite_lse
from conformance.engines.vllm.adapter import (
    DIMS,
    VllmEngine,
    backend_class,
    write_model_config,
)
from conformance.metadata.record import CommonAttentionMetadata
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

BF16, E4M3 = torch.bfloat16, torch.float8_e4m3fn
DECODER = "decoder"  # vLLM's AttentionType.DECODER


@dataclass(frozen=True)
class Implementation:
    """One vLLM MLA implementation as vLLM feeds it on an NVIDIA GPU."""

    name: str
    dtype_pairs: tuple[tuple[torch.dtype, torch.dtype], ...]
    """(q, cache) pairs: vLLM quantises q to fp8 only where the impl takes fp8 q."""
    page_sizes: tuple[int, ...]
    min_capability: int
    """Lowest compute capability (major * 10 + minor) it runs on."""
    lse_layout: str
    """``tokens``: ``[T, H]``; ``requests``: FlashMLA's ``[b, H, s_q]`` (+inf: no token)."""
    non_causal: bool = False
    """Its builder takes a non-causal multi-token decode (vLLM's class attribute
    ``supports_non_causal_multi_token_decode``), which vLLM feeds it only for a group whose
    layers ask for one (a DSpark drafter's)."""


IMPLEMENTATIONS: dict[str, Implementation] = {
    "TRITON_MLA": Implementation(
        "TRITON_MLA",
        ((BF16, BF16), (BF16, E4M3)),
        (16, 64),
        89,
        lse_layout="tokens",
        non_causal=True,
    ),
    "FLASHMLA": Implementation(
        "FLASHMLA", ((BF16, BF16), (E4M3, E4M3)), (64,), 90, lse_layout="requests"
    ),
}


class Fault(enum.Enum):
    """A defect injected into vLLM's path (the negative controls)."""

    NONE = "none"
    K_SCALE_NOT_APPLIED = "the layer's k-scale left at 1.0"
    SEQ_LEN_OFF_BY_ONE = "decode seq_lens[0] one past the request's tokens"
    FP8_CACHE_AS_STORAGE = "the fp8 cache handed over as vLLM's uint8 storage"


@dataclass
class VllmBatch:
    """vLLM's metadata of one batch, and the engine (config) it was built under."""

    metadata: Any
    engine: VllmEngine
    cache_dtype: str
    tokens: int
    """q rows vLLM's decode takes: padded rows' tokens included (`as_vllm_pads`)."""


def as_vllm_pads(cam: CommonAttentionMetadata) -> CommonAttentionMetadata:
    """The batch as vLLM's model runner pads it for a CUDA graph: padded rows keep no query
    token in ``query_start_loc`` (it stays non-decreasing) and a kv length of 0, but the
    token count is padded to ``num_reqs * max_query_len`` (slots -1), so a uniform decode's
    q has the same rows per request (vllm/v1/worker/gpu_model_runner.py, _prepare_inputs
    and _build_attention_metadata)."""
    tokens = cam.num_reqs * int(cam.max_query_len)
    if tokens == cam.num_actual_tokens:
        return cam
    pad = cam.slot_mapping.new_full((tokens - cam.num_actual_tokens,), -1)
    return dataclasses.replace(
        cam, num_actual_tokens=tokens, slot_mapping=torch.cat([cam.slot_mapping, pad])
    )


class ScaledLayer:
    """What ``forward_mqa`` reads from vLLM's `MLAAttention` layer: its per-tensor scales."""

    def __init__(self, q_scale: float, k_scale: float, device: torch.device) -> None:
        for name, value in (("q", q_scale), ("k", k_scale), ("v", k_scale)):
            setattr(self, f"_{name}_scale", torch.tensor(value, dtype=torch.float32, device=device))
            setattr(self, f"_{name}_scale_float", float(value))


def _cache_dtype(kv_dtype: torch.dtype) -> str:
    return "fp8" if kv_dtype.itemsize == 1 else "auto"


class VllmDecodeBuilder(PlanFreeBuilder):
    """The suite's decode metadata (for the judges) with vLLM's own metadata attached."""

    def __init__(
        self,
        config: BuilderConfig,
        layer_names: list[str],
        static_forward_context: Any,
        *,
        backend: VllmDecodeBackend,
    ) -> None:
        super().__init__(config, layer_names, static_forward_context)
        self.backend = backend

    def build(self, cam: CommonAttentionMetadata) -> MLAMetadata:
        meta = super().build(cam)
        if meta.decode is not None:
            meta.decode.scheduler = self.backend.vllm_build(self.config, cam)
        return meta


class VllmDecodeBackend(Backend):
    """One vLLM MLA implementation's builder and ``forward_mqa`` on a CUDA GPU."""

    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL
    plan_format: ClassVar[str | None] = None
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = (BF16, E4M3)
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = (BF16, E4M3)
    numerics: ClassVar[str] = "tensor-core"
    device_kind: ClassVar[str] = "cuda"

    def __init__(self, implementation: str, workdir: Path, fault: Fault = Fault.NONE) -> None:
        self.impl = IMPLEMENTATIONS[implementation]
        self.name = f"vllm.{implementation.lower()}"  # type: ignore[misc]
        self.dtype_pairs = self.impl.dtype_pairs  # type: ignore[misc]
        self.page_sizes = self.impl.page_sizes  # type: ignore[misc]
        self.workdir = workdir
        self.fault = fault
        self._engines: dict[tuple[int, str, int, int], VllmEngine] = {}
        self._impls: dict[tuple[int, str, float], Any] = {}

    # -- what it is and whether it runs --------------------------------------------------

    def availability(self) -> Availability:
        if not torch.cuda.is_available():
            return Availability(False, "no CUDA device")
        major, minor = torch.cuda.get_device_capability()
        if major * 10 + minor < self.impl.min_capability:
            return Availability(
                False,
                f"{self.impl.name} needs compute capability {self.impl.min_capability} or "
                f"more; this GPU has {major}{minor}",
            )
        try:
            self.backend_class()
        except Exception as error:  # vLLM reports its own reason: one line of it
            return Availability(False, f"{type(error).__name__}: {error}".splitlines()[0])
        return Availability(True, "")

    @property
    def device(self) -> torch.device:
        return torch.device("cuda")

    def builder_cls(self) -> type[MetadataBuilder]:
        return VllmDecodeBuilder

    def make_builder(
        self, config: BuilderConfig, layer_names: list[str], static_forward_context: Any
    ) -> MetadataBuilder:
        return VllmDecodeBuilder(config, layer_names, static_forward_context, backend=self)

    def backend_class(self) -> type:
        """vLLM's backend class of this implementation (importing its module)."""
        return backend_class(self.impl.name)

    # -- vLLM's builder --------------------------------------------------------------------

    def engine(self, heads: int, cache_dtype: str, page_size: int, q_len: int) -> VllmEngine:
        """A `VllmEngine` for these settings (made once): ``q_len - 1`` speculative tokens."""
        key = (heads, cache_dtype, page_size, q_len)
        if key not in self._engines:
            model = self.workdir / f"model-h{heads}"
            write_model_config(model, heads=heads)
            self._engines[key] = VllmEngine(
                model, cache_dtype=cache_dtype, block_size=page_size, speculative_tokens=q_len - 1
            )
        return self._engines[key]

    def vllm_build(self, config: BuilderConfig, cam: CommonAttentionMetadata) -> VllmBatch:
        """vLLM's builder of this implementation on the whole batch."""
        cache_dtype = _cache_dtype(config.kv_cache.dtype)
        engine = self.engine(
            config.num_heads, cache_dtype, config.kv_cache.block_size, int(cam.max_query_len)
        )
        layers = engine.layers()
        if not cam.causal:
            for layer in layers.values():  # as vLLM's MLAAttention of a DSpark drafter group
                layer.non_causal_multi_token_decode = True
        builder = engine.construct(self.impl.name, layers, device=self.device)
        padded = as_vllm_pads(cam)
        metadata = engine.build(builder, engine.record_of(padded))
        if self.fault is Fault.SEQ_LEN_OFF_BY_ONE:
            metadata.decode.seq_lens[0] += 1
        return VllmBatch(metadata, engine, cache_dtype, padded.num_actual_tokens)

    # -- vLLM's decode ---------------------------------------------------------------------

    def implementation(self, batch: VllmBatch, sm_scale: float) -> Any:
        """vLLM's implementation class, constructed as vLLM's layer constructs it."""
        from vllm.config import set_current_vllm_config

        heads = batch.engine.heads
        key = (heads, batch.cache_dtype, sm_scale)
        if key not in self._impls:
            with set_current_vllm_config(batch.engine.config):
                self._impls[key] = self.backend_class().get_impl_cls()(
                    num_heads=heads,
                    head_size=DIMS.cache_width,
                    scale=sm_scale,
                    num_kv_heads=1,
                    alibi_slopes=None,
                    sliding_window=None,
                    kv_cache_dtype=batch.cache_dtype,
                    logits_soft_cap=None,
                    attn_type=DECODER,
                    kv_sharing_target_layer_name=None,
                    q_lora_rank=DIMS.q_lora_rank,
                    kv_lora_rank=DIMS.kv_lora_rank,
                    qk_nope_head_dim=DIMS.qk_nope_head_dim,
                    qk_rope_head_dim=DIMS.qk_rope_head_dim,
                    qk_head_dim=DIMS.qk_head_dim,
                    v_head_dim=DIMS.v_head_dim,
                    kv_b_proj=None,
                )
        return self._impls[key]

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from vllm.config import set_current_vllm_config

        batch: VllmBatch = decode.scheduler
        impl = self.implementation(batch, scales.sm_scale)
        k_scale = 1.0 if self.fault is Fault.K_SCALE_NOT_APPLIED else scales.kv_scale
        layer = ScaledLayer(scales.q_scale, k_scale, q.device)
        if self.fault is Fault.FP8_CACHE_AS_STORAGE and kv_cache.dtype.itemsize == 1:
            kv_cache = kv_cache.view(torch.uint8)
        tokens = q.shape[0]
        if batch.tokens > tokens:  # the padded rows' tokens, as vLLM's runner pads q
            q = torch.cat([q, q.new_zeros((batch.tokens - tokens, *q.shape[1:]))])
        with set_current_vllm_config(batch.engine.config):
            out, lse = impl.forward_mqa(q, kv_cache, batch.metadata, layer)
        out = out.reshape(batch.tokens, q.shape[1], DIMS.kv_lora_rank)[:tokens]
        lse = self.suite_lse(lse)
        return out.to(torch.bfloat16), None if lse is None else lse[:tokens]

    def suite_lse(self, lse: torch.Tensor | None) -> torch.Tensor | None:
        """vLLM's LSE as the suite's ``[T, H]`` natural-log fp32 (−inf: no token seen)."""
        if lse is None:
            return None
        if self.impl.lse_layout == "requests" and lse.dim() == 3:
            return to_suite_lse(lse)  # FlashMLA's [b, H, s_q], +inf where no token is seen
        return lse.float()

    def provenance(self) -> dict[str, str]:
        import vllm

        return {"library": "vllm", "version": vllm.__version__, "implementation": self.impl.name}
