"""The ``flashmla`` backend on a Hopper GPU with FlashMLA's real ops (skipped elsewhere).

Run natively by scripts/gpu_flashmla.sh. The decode of a batch, captured in a CUDA graph
after its first (schedule-making) call, replays to the same bits as the eager decode, and
still matches the golden: FlashMLA's schedule is made once per batch, outside the graph.
"""

from __future__ import annotations

import pytest
import torch

from backends import registry
from conformance.goldens import GoldenStore, load_golden
from conformance.goldens.assertions import assert_result_matches, run_decode
from conformance.goldens.relayout import for_backend
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.stubs.protocol import MLAAttentionLayer

LAYER = "model.layers.0.self_attn.attn"
CASES = ("tiny-triton-h16-bf16-q2-p16-cu132-padded", "gfx950-h128-fp8-q4-p1-cu80")


@pytest.fixture(scope="module")
def backend():
    found = registry.get_backend("flashmla")
    available = found.availability()
    if not available.available:
        pytest.skip(f"flashmla: {available.reason}")
    return found


@pytest.mark.parametrize("case_id", CASES)
def test_a_captured_decode_replays_the_eager_result(backend, case_id: str) -> None:
    golden = for_backend(load_golden(GoldenStore(), case_id), backend)
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=golden.case.heads)
    config = golden.builder_config(backend.device)
    builder = backend.make_builder(config, [LAYER], {LAYER: layer})
    decode = builder.build(golden.cam(backend.device)).decode
    eager_out, eager_lse = run_decode(backend, golden, decode)  # makes the schedule
    q, cache = golden.q(backend.device), golden.kv_cache(backend.device)
    scales = {"sm_scale": golden.sm_scale, "q_scale": golden.q_scale, "kv_scale": golden.kv_scale}
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = backend.decode(q, cache, decode, **scales)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse)
    assert_result_matches(
        out=out, lse=lse, golden=golden, backend=backend, record=lambda *a: None, what="replay"
    )
