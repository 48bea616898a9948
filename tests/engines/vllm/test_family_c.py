"""Family C on vLLM: ROCM_AITER_MLA's real builder plans through the suite's AITER stand-in."""

from __future__ import annotations

import pytest
import torch

from conformance.engines import checks
from conformance.engines.vllm.adapter import VllmEngine, standin, write_model_config
from conformance.goldens.record import load_golden, plans_equal
from conformance.goldens.store import GoldenStore, default_root
from conformance.metadata.batch import BatchSpec

FP8_GOLDENS = ["gfx942-h16-fp8-q1-p1-cu304-b64"]  # fp8 q and cache, page 1, one q token
MTP_GOLDEN = "gfx950-h32-fp8-q2-p1-cu256-vllm46997"  # two q tokens: #46997's MTP case


def _plan_call(workdir, golden, *, speculative: bool = False):
    """vLLM's ROCM_AITER_MLA builder on `golden`'s batch: its one planner call, or None."""
    case = golden.case
    model = workdir / f"model-h{case.heads}"
    write_model_config(model, heads=case.heads)
    tokens = case.q_len - 1 if speculative else 0
    engine = VllmEngine(model, cache_dtype="fp8", block_size=1, speculative_tokens=tokens)
    aiter = standin()
    aiter.arch, aiter.num_cus = case.arch, case.num_cus
    built = engine.construct("ROCM_AITER_MLA", engine.layers())
    spec = BatchSpec(tuple(case.seq_lens), (case.q_len,) * len(case.seq_lens), case.id)
    before = len(aiter.calls)
    engine.build(built, engine.record(spec))
    assert len(aiter.calls) <= before + 1, "the builder planned one batch twice"
    return aiter.calls[-1] if len(aiter.calls) == before + 1 else None


@pytest.mark.parametrize("case_id", FP8_GOLDENS)
def test_planner_call_carries_fp8_and_plan_equals_golden(workdir, case_id) -> None:
    golden = load_golden(GoldenStore(default_root()), case_id)
    call = _plan_call(workdir, golden)
    assert call is not None, "the builder did not call get_mla_metadata_v1"
    expected = golden.planner_call()
    assert not checks.planner_dtype_problems(
        call.arguments, expected["q_dtype"], expected["kv_dtype"]
    )
    assert plans_equal(call.plan, golden.plan()), f"vLLM's plan differs from {case_id}"


@pytest.mark.negative_control
def test_planner_call_without_fp8_dtypes_fails_naming_them(workdir) -> None:
    """The real call with its dtypes dropped (#46997) is caught, naming dtype_q and dtype_kv."""
    golden = load_golden(GoldenStore(default_root()), FP8_GOLDENS[0])
    call = _plan_call(workdir, golden)
    assert call is not None, "the builder did not call get_mla_metadata_v1"
    stripped = {k: v for k, v in call.arguments.items() if k not in ("dtype_q", "dtype_kv")}
    problems = checks.planner_dtype_problems(
        stripped, golden.case.q_torch_dtype, torch.float8_e4m3fnuz
    )
    assert len(problems) == 2 and "dtype_q" in problems[0] and "dtype_kv" in problems[1]


def test_two_token_fp8_golden_of_46997_on_the_speculative_builder(workdir) -> None:
    """#46997's own case: 32 heads, fp8, two q tokens a request (MTP), gfx950, 256 CUs.

    Under vLLM's n-gram speculative config (one speculative token) the real builder plans
    the two tokens as one decode: its planner call must carry the fp8 dtypes and two q
    tokens, and its plan must equal the golden's (the plan the golden's output was made on).
    """
    golden = load_golden(GoldenStore(default_root()), MTP_GOLDEN)
    call = _plan_call(workdir, golden, speculative=True)
    assert call is not None, "the speculative builder did not plan the two-token decode"
    expected = golden.planner_call()
    assert expected["q_dtype"].itemsize == 1 and expected["kv_dtype"].itemsize == 1
    fp8 = standin().fp8  # the stand-in's fp8 flavour is AITER's dtypes.fp8 here
    assert not checks.planner_dtype_problems(call.arguments, fp8, fp8)
    assert call.arguments["max_seqlen_qo"] == golden.case.q_len == 2
    assert call.arguments["uni_seqlen_qo"] == 2
    assert plans_equal(call.plan, golden.plan()), f"vLLM's plan differs from {MTP_GOLDEN}"


@pytest.mark.negative_control
def test_two_token_batch_without_speculation_is_not_planned_as_a_decode(workdir) -> None:
    """Without the speculative config the same batch is no decode: no two-token plan."""
    golden = load_golden(GoldenStore(default_root()), MTP_GOLDEN)
    call = _plan_call(workdir, golden)
    assert call is None or call.arguments["max_seqlen_qo"] != 2


BF16_TINY_GOLDENS = [
    "tiny-triton-h16-bf16-q2-p16-cu132-padded",
    "tiny-gfx942-h32-bf16-q2-p64-cu304",
]


@pytest.mark.parametrize("case_id", BF16_TINY_GOLDENS)
def test_triton_mla_decode_matches_tiny_golden(case_id) -> None:
    """vLLM's Triton MLA decode kernel, interpreted, on a tiny golden.

    The bf16 inputs are widened to fp32 exactly: under TRITON_INTERPRET=1 the engine's
    Triton mishandles bf16 loads (docs/engines.md, "Findings"), so the kernel's own
    arithmetic runs in fp32 on the golden's exact values. Rows of a request are expanded
    as vLLM's TritonMLAImpl expands a causal multi-token decode block.
    """
    from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd

    from conformance.goldens.record import KV_LORA_RANK, SM_SCALE

    golden = load_golden(GoldenStore(default_root()), case_id)
    case = golden.case
    q = golden["q"].float()
    cache = golden.kv_cache().float().unsqueeze(2)
    seq_lens = golden["seq_lens"]
    offsets = torch.arange(1 - case.q_len, 1, dtype=seq_lens.dtype)
    row_lens = (seq_lens.unsqueeze(1) + offsets).flatten().clamp(min=0)
    table = golden["block_table"].repeat_interleave(case.q_len, dim=0)
    rows, splits = q.shape[0], 4
    out = torch.zeros(rows, case.heads, KV_LORA_RANK)
    lse = torch.zeros(rows, case.heads)
    logits = torch.empty(rows, case.heads, splits, KV_LORA_RANK + 1)
    decode_attention_fwd(
        q, cache, cache[..., :KV_LORA_RANK], out, lse, table, row_lens, logits, splits,
        SM_SCALE, case.page_size, is_mla=True,
    )  # fmt: skip
    torch.testing.assert_close(out, golden["out"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, golden["lse"], atol=1e-4, rtol=1e-4)
