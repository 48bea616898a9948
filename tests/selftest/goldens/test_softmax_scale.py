"""The softmax scale is part of the contract: its derivation, the cases that use it, and the
negative controls — a backend that ignores the caller's ``sm_scale`` must fail.

A decode that computes its own scale from q's width (``1/√q.shape[-1]`` = 1/√576, the scale
of most goldens) fails exactly the goldens at DeepSeek-V3's scale, in the numerics contract
and in the plan contract's re-plan output check; one that hard-codes DeepSeek-V3's scale
fails the others.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from backends import registry
from backends.base import DecodeScales
from backends.cpu import CpuReferenceBackend
from conformance.goldens import CASES, GoldenError, GoldenStore, golden_from_stored
from conformance.metadata.dims import DEEPSEEK_V3
from conformance.numerics.softmax_scale import (
    DEFAULT_SM_SCALE,
    DEFAULT_SOFTMAX_SCALE,
    SOFTMAX_SCALES,
    YarnRopeScaling,
    deepseek_sm_scale,
    score_rms,
    softmax_scale,
    yarn_mscale,
)

pytestmark = pytest.mark.selftest

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
CONTRACTS = (CONFORMANCE / "test_numerics.py", CONFORMANCE / "test_plan.py")
DSV3 = "deepseek-v3"
SCALED = {c.id for c in CASES if c.softmax_scale == DSV3}
DEFAULT_TINY = ("tiny-gfx942-h16-bf16q-fp8kv-q1-p1-cu80", "tiny-gfx950-h32-fp8-q2-p16-cu256")


def test_deepseek_v3_scale_follows_from_its_config() -> None:
    # DeepSeek-V3: qk_nope 128 + qk_rope 64; rope_scaling yarn, factor 40, mscale_all_dim 1.
    mscale = 0.1 * 1.0 * math.log(40) + 1.0
    assert DEEPSEEK_V3.dims.qk_head_dim == 192
    assert yarn_mscale(40.0, 1.0) == pytest.approx(mscale) == pytest.approx(1.368888, abs=1e-6)
    assert SOFTMAX_SCALES[DSV3] == pytest.approx(mscale**2 / math.sqrt(192), rel=1e-15)
    assert SOFTMAX_SCALES[DSV3] == pytest.approx(0.135234, abs=1e-6)
    assert yarn_mscale(1.0, 1.0) == 1.0  # no rope scaling: no attention factor
    assert deepseek_sm_scale(DEEPSEEK_V3.dims, None) == 1 / math.sqrt(192)
    half = deepseek_sm_scale(DEEPSEEK_V3.dims, YarnRopeScaling(factor=40.0, mscale_all_dim=0.5))
    assert half == pytest.approx((0.05 * math.log(40) + 1) ** 2 / math.sqrt(192))
    assert DEFAULT_SM_SCALE == SOFTMAX_SCALES[DEFAULT_SOFTMAX_SCALE] == 1 / math.sqrt(576)
    assert score_rms(DEFAULT_SM_SCALE) == 1.0
    assert score_rms(SOFTMAX_SCALES[DSV3]) == pytest.approx(3.2456, abs=1e-4)
    with pytest.raises(ValueError, match=r"softmax_scale: expected one of .*'nope'"):
        softmax_scale("nope")


def test_the_goldens_cover_deepseeks_scale_tiny_in_every_dtype_pair() -> None:
    scaled = [c for c in CASES if c.id in SCALED]
    assert {(c.q_dtype, c.kv_dtype) for c in scaled} == {
        ("bf16", "bf16"),
        ("bf16", "fp8"),
        ("fp8", "fp8"),
    }
    assert all(c.tiny for c in scaled)  # the interpreter runs them too
    assert any(c.q_len > 1 and c.causal for c in scaled)
    manifest = GoldenStore().read_manifest()
    assert any("split" in manifest.entries[c].provenance["features"] for c in SCALED)
    for case_id in SCALED:
        assert manifest.entries[case_id].case["softmax_scale"] == DSV3
    unnamed = [e.case for e in manifest.entries.values() if "softmax_scale" not in e.case]
    assert unnamed and all(c["id"] not in SCALED for c in unnamed)  # default: left out


def test_a_case_naming_an_unknown_scale_is_refused() -> None:
    case = next(c for c in CASES if c.id in SCALED)
    assert not case.problems()
    assert any("softmax_scale" in p for p in replace(case, softmax_scale="x").problems())


def test_a_golden_whose_scale_differs_from_its_case_is_refused() -> None:
    stored = GoldenStore().load(sorted(SCALED)[0])
    golden = golden_from_stored(stored)
    assert golden.sm_scale == SOFTMAX_SCALES[DSV3] == golden.case.sm_scale
    wrong = {**stored.meta, "sm_scale": DEFAULT_SM_SCALE}
    with pytest.raises(GoldenError, match=r"metadata: sm_scale 0\.041666.* differs from the case"):
        golden_from_stored(replace(stored, meta=wrong))


# --------------------------------------------------------------------------------------
# Negative controls: a backend that does not use the scale it receives


class OwnScaleBackend(CpuReferenceBackend):
    """BROKEN: uses its own scale, ``1/√q.shape[-1]``, whatever the caller passes."""

    name: ClassVar[str] = "own-scale"

    def decode_scaled(self, q, kv_cache, decode, scales: DecodeScales):
        own = DecodeScales(1.0 / math.sqrt(q.shape[-1]), scales.q_scale, scales.kv_scale)
        return super().decode_scaled(q, kv_cache, decode, own)


class HardcodedDeepSeekScaleBackend(CpuReferenceBackend):
    """BROKEN: hard-codes DeepSeek-V3's scale, whatever the caller passes."""

    name: ClassVar[str] = "hardcoded-deepseek-scale"

    def decode_scaled(self, q, kv_cache, decode, scales: DecodeScales):
        fixed = DecodeScales(SOFTMAX_SCALES[DSV3], scales.q_scale, scales.kv_scale)
        return super().decode_scaled(q, kv_cache, decode, fixed)


def _failed(result: pytest.RunResult, test: str) -> set[str]:
    pattern = re.compile(rf"^FAILED .*::{test}\[([^\]]+)\]")
    return {m.group(1) for line in result.outlines if (m := pattern.match(line))}


def _run(pytester, monkeypatch, backend: CpuReferenceBackend) -> pytest.RunResult:
    real = registry.get_backend
    monkeypatch.setattr(
        registry, "get_backend", lambda name: backend if name == backend.name else real(name)
    )
    cases = " or ".join((*sorted(SCALED), *DEFAULT_TINY))
    return pytester.runpytest_inprocess(
        *map(str, CONTRACTS),
        "-p",
        "no:cacheprovider",
        "-rf",
        f"--backend={backend.name}",
        "-k",
        f"(decode_matches_golden or decode_is_plan_invariant) and ({cases})",
    )


@pytest.mark.parametrize(
    ("backend", "fails"),
    [(OwnScaleBackend(), SCALED), (HardcodedDeepSeekScaleBackend(), set(DEFAULT_TINY))],
    ids=["own-scale", "hardcoded-deepseek-scale"],
)
def test_a_decode_ignoring_the_callers_scale_fails(pytester, monkeypatch, backend, fails):
    assert fails, "no golden at the scale this backend gets wrong"
    assert torch.float8_e4m3fnuz in backend.q_dtypes  # every case applies to it
    result = _run(pytester, monkeypatch, backend)
    assert _failed(result, "test_decode_matches_golden") == fails
    assert _failed(result, "test_decode_is_plan_invariant") == fails
    ran = len(SCALED) + len(DEFAULT_TINY)
    result.assert_outcomes(passed=2 * (ran - len(fails)), failed=2 * len(fails))
    case = sorted(fails)[0]
    result.stdout.fnmatch_lines([f"*{case} decode (own metadata) *: MISMATCH*"])
