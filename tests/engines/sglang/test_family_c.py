"""Family C on SGLang: its aiter backend's planner call over the suite's AITER stand-in, and
its Triton MLA decode on the tiny goldens."""

from __future__ import annotations

import pytest
import torch

from conformance.engines import checks
from conformance.engines.sglang.aiter_standin import HIP_FP8, standin
from conformance.engines.sglang.layer import decode_forward, make_layer
from conformance.engines.sglang.measure import Measurement
from conformance.goldens.record import load_golden, plans_equal
from conformance.goldens.store import GoldenStore, default_root
from conformance.metadata.batch import BatchSpec
from conformance.persistent.planner import plan_persistent_decode

FP8_GOLDEN = "gfx942-h16-fp8-q1-p1-cu304-b64"
AUTO_SPLITS = "SGLANG_AITER_MLA_AUTO_KV_SPLITS"  # SGLang's v1.2 planning with AITER's own splits


def _plan_and_kernel(heads: int):
    """SGLang's aiter decode at `heads` heads, fp8 cache: its planner call and kernel call."""
    aiter = standin()
    run = Measurement(heads=heads, batch_size=16)
    before = (len(aiter.calls), len(aiter.kernel_calls))
    decode_forward(run, "aiter", make_layer(heads))  # q in bf16, as SGLang's model gives it
    assert len(aiter.calls) > before[0], "init_forward_metadata did not call get_mla_metadata_v1"
    assert len(aiter.kernel_calls) > before[1], "forward_decode did not call mla_decode_fwd"
    return aiter.calls[-1], aiter.kernel_calls[-1]


def _replan(call, q_dtype, kv_dtype):
    a = call.arguments
    return plan_persistent_decode(
        a["seqlens_qo_indptr"], a["seqlens_kv_indptr"], a["kv_last_page_lens"],
        num_heads_q=a["num_heads_per_head_k"] * a["num_heads_k"],
        max_seqlen_qo=a["max_seqlen_qo"],
        uni_seqlen_qo=a["uni_seqlen_qo"], page_size=a["page_size"],
        kv_granularity=a["kv_granularity"],
        causal=a["is_causal"], max_split_per_batch=a["max_split_per_batch"], q_dtype=q_dtype,
        kv_dtype=kv_dtype, arch="gfx942", num_cus=standin().num_cus,
    )  # fmt: skip


@pytest.mark.parametrize(
    "heads",
    [
        16,
        pytest.param(
            128,
            marks=pytest.mark.xfail(
                strict=True,
                reason="reported finding: SGLang plans fp8 q (aiter_backend.py make_mla_meta_data: "
                "dtype_q=dtype_kv=kv_cache_dtype) while mla_decode_fwd gets bf16 q on gfx942 "
                "(_mla_decode_fwd_with_head_pad casts q to fp8 only on gfx95 at 16 heads, q > 4); "
                "AITER plans 128 fp8/fp8 heads natively and folds bf16-q to 16",
            ),
        ),
    ],
)
def test_planner_dtypes_are_the_kernels(heads, record_property) -> None:
    """Issue question 2: the planner call's dtypes against the q and KV the kernel is given."""
    call, kernel = _plan_and_kernel(heads)
    record_property("planner_dtypes", f"{call.arguments['dtype_q']}/{call.arguments['dtype_kv']}")
    record_property("kernel_dtypes", f"{kernel.q_dtype}/{kernel.kv_dtype}")
    planned = _replan(call, call.arguments["dtype_q"], call.arguments["dtype_kv"])
    given = _replan(call, kernel.q_dtype, kernel.kv_dtype)
    record_property("plans_agree", plans_equal(planned, given))
    assert plans_equal(planned, given), (
        f"{heads} heads: planned for {call.arguments['dtype_q']} q, "
        f"the kernel gets {kernel.q_dtype}"
    )


def test_plan_equals_golden(monkeypatch) -> None:
    """SGLang's fp8 plan (AITER's own KV splits, v1.2) against the golden of its batch."""
    monkeypatch.setenv(AUTO_SPLITS, "1")
    golden = load_golden(GoldenStore(default_root()), FP8_GOLDEN)
    case = golden.case
    aiter = standin(case.arch, case.num_cus)
    run = Measurement(heads=case.heads, batch_size=len(case.seq_lens))
    spec = BatchSpec(tuple(case.seq_lens), (case.q_len,) * len(case.seq_lens), case.id)
    from conformance.engines.sglang.batch import forward_batch

    run.build(run.construct("aiter"), forward_batch(spec, run.runner("aiter")))
    call = aiter.calls[-1]
    assert not checks.planner_dtype_problems(call.arguments, HIP_FP8, HIP_FP8)
    assert plans_equal(call.plan, golden.plan()), f"SGLang's plan differs from {FP8_GOLDEN}"


@pytest.mark.negative_control
def test_planner_call_with_bf16_dtypes_for_fp8_cache_is_caught() -> None:
    """The real call with bf16 dtypes for an fp8 cache (#46997) is caught, naming both."""
    call, _ = _plan_and_kernel(16)
    wrong = {**call.arguments, "dtype_q": torch.bfloat16, "dtype_kv": torch.bfloat16}
    problems = checks.planner_dtype_problems(wrong, HIP_FP8, HIP_FP8)
    assert len(problems) == 2 and "dtype_q" in problems[0] and "dtype_kv" in problems[1]


TINY_GOLDENS = ["tiny-triton-h16-bf16-q2-p16-cu132-padded", "tiny-gfx942-h32-bf16-q2-p64-cu304"]


@pytest.mark.parametrize("case_id", TINY_GOLDENS)
def test_triton_backend_decode_matches_tiny_golden(case_id) -> None:
    """SGLang's triton backend (its metadata and decode), interpreted, on a tiny golden.

    Each q row of a golden request becomes one SGLang decode request whose kv length is the
    row's causal length; the golden's values run widened to fp32 (docs/engines.md).
    """
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    from conformance.engines.sglang.adapter import record_class
    from conformance.engines.sglang.runner import make_runner
    from conformance.goldens.record import KV_LORA_RANK, SM_SCALE

    golden = load_golden(GoldenStore(default_root()), case_id)
    case, page = golden.case, golden.case.page_size
    cache = golden.kv_cache().float().reshape(-1, golden.kv_cache().shape[-1])
    table, seq_lens = golden["block_table"], golden["seq_lens"].tolist()
    rows = [
        (b, s - (case.q_len - 1 - i)) for b, s in enumerate(seq_lens) for i in range(case.q_len)
    ]
    runner = make_runner("triton", heads=case.heads, batch_size=len(rows), dtype=torch.float32)
    keys = runner.token_to_kv_pool.get_key_buffer(0)
    slots = {}
    for b, s in enumerate(seq_lens):
        flat = [int(table[b, p // page]) * page + p % page for p in range(s)]
        slots[b] = [f + 1 for f in flat]
        keys[slots[b], 0] = cache[flat]
    for r, (b, length) in enumerate(rows):
        runner.req_to_token_pool.req_to_token[r, :length] = torch.tensor(slots[b][:length])
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    lengths = torch.tensor([length for _, length in rows], dtype=torch.int32)
    batch = record_class()(
        forward_mode=ForwardMode.DECODE, batch_size=len(rows),
        input_ids=torch.zeros(len(rows), dtype=torch.int64),
        req_pool_indices=torch.arange(len(rows), dtype=torch.int32), seq_lens=lengths,
        out_cache_loc=torch.tensor([slots[b][n - 1] for b, n in rows]),
        seq_lens_sum=int(lengths.sum()),
    )  # fmt: skip
    batch.seq_lens_cpu, batch.positions = lengths.clone(), (lengths - 1).long()
    runner.kv_index_translator.bind_own_plan(batch)
    layer = make_layer(case.heads)
    layer.scaling = SM_SCALE
    backend = ATTENTION_BACKENDS["triton"](runner)
    backend.init_forward_metadata(batch)
    q = golden["q"].float().reshape(len(rows), -1)
    out = backend.forward_decode(q, None, None, layer, batch, save_kv_cache=False)
    out = out.view(len(rows), case.heads, KV_LORA_RANK)
    torch.testing.assert_close(out, golden["out"].float(), atol=1e-4, rtol=1e-4)
