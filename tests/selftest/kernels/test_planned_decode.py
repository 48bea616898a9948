"""Self-tests of the capturable decode step (`kernels.device_plan.planned_decode`), on a GPU.

One step (device plan + persistent decode + reduce) is captured in a CUDA graph over fixed
input buffers, then replayed for a second batch of the same shape class (same batch size,
q length and page capacity, other kv lengths and pages): its plan equals the reference
planner's for that batch and its output equals, bit for bit, the decode of the reference
plan run without a graph. Skipped without a CUDA device (the interpreter cannot capture).
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

pytestmark = pytest.mark.selftest

if not torch.cuda.is_available() or torch.version.hip is not None:
    pytest.skip("no CUDA device: CUDA graphs need one", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed")

from conformance.persistent import plan_persistent_decode  # noqa: E402
from conformance.persistent.plan import PLAN_BUFFERS  # noqa: E402
from kernels import device_plan  # noqa: E402
from kernels.triton_mla import persistent_mla_decode  # noqa: E402

from plancall import decode_scalars  # noqa: E402

DEVICE = torch.device("cuda")
BATCH, HEADS, PAGE, MAX_PAGES = 24, 16, 16, 64
NUM_CUS = torch.cuda.get_device_properties(0).multi_processor_count
SM_SCALE = 576**-0.5


def batch_inputs(seed: int) -> dict[str, torch.Tensor]:
    """Index tensors of one batch: random kv lengths (1..MAX_PAGES pages), shuffled pages."""
    rng = random.Random(seed)
    tokens = [rng.randint(1, MAX_PAGES * PAGE) for _ in range(BATCH)]
    pages = [(n + PAGE - 1) // PAGE for n in tokens]
    perm = torch.randperm(BATCH * MAX_PAGES, generator=torch.Generator().manual_seed(seed))
    return {
        "qo_indptr": torch.arange(BATCH + 1, dtype=torch.int32),
        "kv_indptr": torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32),
        "kv_indices": perm.to(torch.int32),  # capacity: every page; the plan reads a prefix
        "kv_last_page_lens": torch.tensor(
            [n - (p - 1) * PAGE for n, p in zip(tokens, pages, strict=True)], dtype=torch.int32
        ),
    }


def planner_call() -> dict[str, object]:
    return decode_scalars(num_heads_q=HEADS, page_size=PAGE, num_cus=NUM_CUS)


def eager_reference(q, cache, inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The decode of the reference planner's plan, without a graph."""
    index = {k: inputs[k] for k in ("qo_indptr", "kv_indptr", "kv_last_page_lens")}
    plan = plan_persistent_decode(**index, **planner_call()).to(DEVICE)
    dev = {k: v.to(DEVICE) for k, v in inputs.items()}
    return persistent_mla_decode(
        q, cache, plan, page_size=PAGE, sm_scale=SM_SCALE, causal=True, **dev
    )


def test_a_captured_step_replays_for_another_batch() -> None:
    torch.manual_seed(0)
    q = torch.randn(BATCH, HEADS, 576, device=DEVICE).to(torch.bfloat16)
    cache = (0.1 * torch.randn(BATCH * MAX_PAGES, PAGE, 576, device=DEVICE)).to(torch.bfloat16)
    first, second = batch_inputs(1), batch_inputs(2)
    static = {k: v.to(DEVICE) for k, v in first.items()}
    buffers = device_plan.plan_buffers(
        static["qo_indptr"], static["kv_indptr"], static["kv_last_page_lens"], **planner_call()
    )
    out = torch.empty(BATCH, HEADS, 512, dtype=torch.bfloat16, device=DEVICE)
    lse = torch.empty(BATCH, HEADS, dtype=torch.float32, device=DEVICE)

    def step() -> None:
        device_plan.planned_decode(
            q,
            cache,
            **static,
            buffers=buffers,
            decode={"sm_scale": SM_SCALE},
            out=out,
            lse=lse,
            **planner_call(),
        )

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for inputs in (first, second):
        for name, tensor in inputs.items():
            static[name].copy_(tensor)
        graph.replay()
        torch.cuda.synchronize()
        index = {k: inputs[k] for k in ("qo_indptr", "kv_indptr", "kv_last_page_lens")}
        expected_plan = plan_persistent_decode(**index, **planner_call())
        for name in PLAN_BUFFERS:
            assert torch.equal(getattr(buffers, name).cpu(), getattr(expected_plan, name)), name
        want_out, want_lse = eager_reference(q, cache, inputs)
        assert torch.equal(out, want_out), "replayed output differs from the eager decode"
        assert torch.equal(lse, want_lse), "replayed LSE differs from the eager decode"
    assert expected_plan.num_partials > 0, "the second batch has no split tile: a weak case"
