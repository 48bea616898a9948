"""The masking check names what a failing row shows: the mask, or a misapplied kv scale.

Fed the exact result of the crafted batch with one fault each: the output without or with
twice the kv scale (LSE exact) is a kv-scale problem, never blamed on the causal window; a
leaked sentinel (LSE at its score) is a window problem; so is an output off by any other
factor, and a halved output over a bf16 cache (kv_scale 1) explains nothing about the scale.
"""

from __future__ import annotations

import pytest
import torch

from conformance.numerics.masking import (
    HEADS,
    KV_SCALE,
    WINDOW,
    make_masking_batch,
    masking_problems,
    masking_summary,
)
from conformance.numerics.softmax_scale import SOFTMAX_SCALES

pytestmark = pytest.mark.selftest

FP8 = torch.float8_e4m3fn


def _exact(batch):
    """The exact output and LSE, one copy per head."""
    out = batch.expected_out[:, None, :].expand(-1, HEADS, -1).clone()
    lse = batch.expected_lse[:, None].expand(-1, HEADS).clone()
    return out, lse


@pytest.mark.parametrize("scale", list(SOFTMAX_SCALES))
def test_the_exact_result_passes_at_every_scale(scale: str) -> None:
    batch = make_masking_batch(torch.bfloat16, FP8, sm_scale=SOFTMAX_SCALES[scale])
    assert batch.sm_scale == SOFTMAX_SCALES[scale]
    assert batch.sentinel_score > 40  # a sentinel dominates every row it leaks into
    assert masking_problems(batch, *_exact(batch)) == []


@pytest.mark.parametrize(
    ("power", "says"), [(-1, "was not applied to the output"), (1, "was applied twice to")]
)
def test_an_output_off_by_the_kv_scale_is_named(power: int, says: str) -> None:
    batch = make_masking_batch(torch.bfloat16, FP8)
    out, lse = _exact(batch)
    problems = masking_problems(batch, out * batch.kv_scale**power, lse)
    assert problems and {p.cause for p in problems} == {KV_SCALE}
    assert all(f"the kv scale (2) {says}" in p.text for p in problems)
    summary = masking_summary(batch, problems)
    assert "does not multiply its output by kv_scale (2) exactly once" in summary
    assert "causal window" not in summary


def test_a_leaked_sentinel_is_a_window_problem() -> None:
    batch = make_masking_batch(torch.bfloat16, FP8)
    out, lse = _exact(batch)
    lse[0] = batch.sentinel_score
    out[0] = 16.0  # the sentinel value times kv_scale
    problems = masking_problems(batch, out, lse)
    assert {p.cause for p in problems} == {WINDOW}
    assert "a leaked sentinel makes it 85.33 or more" in problems[0].text
    assert masking_summary(batch, problems).startswith("the decode let a token outside")


def test_an_output_off_by_another_factor_is_not_a_kv_scale_problem() -> None:
    for kv_dtype, factor in ((FP8, 3.0), (torch.bfloat16, 0.5)):
        batch = make_masking_batch(torch.bfloat16, kv_dtype)
        out, lse = _exact(batch)
        problems = masking_problems(batch, out * factor, lse)
        assert problems and {p.cause for p in problems} == {WINDOW}, kv_dtype
