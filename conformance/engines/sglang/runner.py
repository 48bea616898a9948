"""The model runner SGLang's attention backends are constructed over, and the process settings.

SGLang's backends read the model runner (`ModelRunner`: model config, token pools, device,
cache dtype) and SGLang's process-global context (`sglang.srt.runtime_context`: server
arguments, parallel widths and ranks). `make_runner` builds a `ModelRunner` subclass with
real pools (`ReqToTokenPool`, `MLATokenToKVPool`) sized for the suite's sweep, installs the
server arguments the way SGLang's own MLA test kit does, then states the parallel settings
of one process without tensor or context parallelism.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from conformance.engines.sglang.adapter import BACKENDS, DIMS, MAX_CONTEXT_LEN, SuiteModelConfig

FP8_E4M3 = "fp8_e4m3"
PARALLEL = {"attn_tp_size": 1, "attn_dcp_rank": 0, "attn_dcp_size": 1}


def _runner_class() -> type:
    from sglang.srt.model_executor.model_runner import ModelRunner

    class SuiteModelRunner(ModelRunner):
        """A `ModelRunner` holding only what an attention backend reads (no model)."""

        def __init__(self) -> None:  # the fields are set by `make_runner`
            pass

        hybrid_gdn_config = hybrid_lightning_config = kimi_linear_config = None
        linear_attn_model_spec = mamba2_config = mambaish_config = None

    return SuiteModelRunner


_RUNNER_CLASS: type | None = None
_PARALLEL_SCOPE: Any = None


def server_arguments(
    backend: str, *, fp8: bool, page_size: int, draft_tokens: int = 0
) -> dict[str, Any]:
    """The server arguments a single-process MLA run of `backend` has (no CUDA graphs)."""
    from sglang.srt.model_executor.cuda_graph_config import Backend, CudaGraphConfig, PhaseConfig

    disabled = PhaseConfig(backend=Backend.DISABLED)
    return {
        "attention_backend": backend,
        "chunked_prefill_size": -1,
        "cuda_graph_config": CudaGraphConfig(decode=disabled, prefill=disabled),
        "disable_chunked_prefix_cache": True,
        "disable_radix_cache": False,
        "disaggregation_mode": None,
        "dllm_algorithm": None,
        "dllm_algorithm_config": None,
        "dp_size": 1,
        "enable_deterministic_inference": False,
        "enable_mis": False,
        "flashinfer_mla_disable_ragged": True,
        "is_embedding": False,
        "kv_cache_dtype": FP8_E4M3 if fp8 else "auto",
        "max_running_requests": None,
        "page_size": page_size,
        "pp_size": 1,
        "revision": None,
        "speculative_algorithm": None,
        "speculative_eagle_topk": 0,
        "speculative_num_draft_tokens": draft_tokens,
        "speculative_num_steps": max(0, draft_tokens - 1),
        "tp_size": 1,
        "triton_attention_num_kv_splits": 8,
        "triton_attention_split_tile_size": None,
    }


def state_parallel() -> None:
    """One process, no tensor or decode-context parallelism (kept for the whole run)."""
    global _PARALLEL_SCOPE
    from sglang.srt.runtime_context import get_parallel

    if _PARALLEL_SCOPE is not None:
        _PARALLEL_SCOPE.__exit__(None, None, None)
    _PARALLEL_SCOPE = get_parallel().override(**PARALLEL)
    _PARALLEL_SCOPE.__enter__()


def make_runner(
    backend: str,
    *,
    heads: int = 16,
    batch_size: int = 64,
    page_size: int | None = None,
    model_config: Any = None,
    dtype: torch.dtype = torch.bfloat16,
    fp8_dtype: torch.dtype = torch.float8_e4m3fn,
) -> Any:
    """A model runner for `backend`, its pools sized for `batch_size` requests."""
    global _RUNNER_CLASS
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool, ReqToTokenPool
    from sglang.srt.model_executor.graph_shared_output import GraphSharedOutput
    from sglang.srt.runtime_context import get_context
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    if _RUNNER_CLASS is None:
        _RUNNER_CLASS = _runner_class()
    target = BACKENDS[backend]
    fp8 = target.cache_dtype == "fp8"
    page = page_size or target.page_size
    runner = _RUNNER_CLASS()
    runner.device, runner.dtype, runner.gpu_id = "cpu", dtype, 0
    runner.kv_cache_dtype = fp8_dtype if fp8 else dtype
    runner.kv_cache_dtype_str = FP8_E4M3 if fp8 else "auto"
    runner.prefill_attention_backend_str = runner.decode_attention_backend_str = backend
    runner.draft_attention_backend = runner.canary_manager = None
    runner.page_size = page
    runner.model_config = model_config or SuiteModelConfig(heads=heads, dtype=dtype)
    runner.spec_algorithm = SpeculativeAlgorithm.NONE
    runner._server_args_override = get_context().override_server_args(
        **server_arguments(backend, fp8=fp8, page_size=page)
    )
    runner.server_args = runner._server_args_override.install()
    state_parallel()
    runner.max_running_requests = batch_size
    runner.req_to_token_pool = ReqToTokenPool(
        size=batch_size, max_context_len=MAX_CONTEXT_LEN, device="cpu", enable_memory_saver=False
    )
    runner.token_to_kv_pool = MLATokenToKVPool(
        size=batch_size * MAX_CONTEXT_LEN + 2 * page,
        page_size=page,
        dtype=runner.kv_cache_dtype,
        kv_lora_rank=DIMS.kv_lora_rank,
        qk_rope_head_dim=DIMS.qk_rope_head_dim,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
    )
    runner.token_to_kv_pool_allocator = types.SimpleNamespace(
        page_size=page, get_kvcache=lambda: runner.token_to_kv_pool
    )
    runner.is_draft_worker = False
    runner.init_kv_index_translator()
    runner.attention_chunk_size = runner.hisparse_coordinator = runner.sliding_window_size = None
    runner.init_new_workspace = runner.is_hybrid_swa = False
    runner.use_mla_backend = True
    runner._kernel_warmed_up = True
    runner.graph_shared_output = GraphSharedOutput(
        device="cpu", max_rows=batch_size * MAX_CONTEXT_LEN
    )
    return runner
