"""How the numerics contract makes each backend's metadata (`numerics_metadata`)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from backends import registry
from backends.cpu import CpuReferenceBackend
from conformance.goldens import GoldenStore, load_golden
from conformance.goldens.assertions import numerics_metadata

pytestmark = pytest.mark.selftest

GFX942 = "tiny-gfx942-h16-bf16q-fp8kv-q1-p1-cu80"
KV_LT_Q = "gfx942-h16-bf16q-fp8kv-q4-p2-cu80-kv-lt-q"


class TritonOnly(CpuReferenceBackend):
    """Plans and executes only the ``triton`` profile (as AITER executes only its arch's)."""

    name: ClassVar[str] = "triton-only"

    def plan_archs(self) -> tuple[str, ...]:
        return ("triton",)

    def decode_archs(self) -> tuple[str, ...]:
        return ("triton",)


class ExecutesAny(TritonOnly):
    name: ClassVar[str] = "executes-any"

    def decode_archs(self) -> None:
        return None


def _builder_for(backend):
    from conformance.metadata.dims import DEEPSEEK_R1
    from conformance.stubs.protocol import MLAAttentionLayer

    def make(golden, **changes):
        layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=golden.case.heads)
        config = golden.builder_config("cpu", **changes)
        builder = backend.make_builder(config, ["l"], {"l": layer})
        return builder, lambda: builder.build(golden.cam("cpu")).decode

    return make


@pytest.mark.parametrize(
    ("backend", "case_id", "what", "arch"),
    [
        (CpuReferenceBackend(), GFX942, "decode (own metadata)", "gfx942"),
        (ExecutesAny(), GFX942, "decode (golden plan fed)", "gfx942"),
        (TritonOnly(), GFX942, "decode (own metadata)", "triton"),
        (TritonOnly(), KV_LT_Q, "decode (golden metadata fed, planned for triton)", "triton"),
        (ExecutesAny(), KV_LT_Q, "decode (golden metadata fed)", "gfx942"),
    ],
    ids=["plans-it", "executes-it", "own-profile", "kv-lt-q-own-profile", "kv-lt-q-fed"],
)
def test_metadata_follows_the_declaration(backend, case_id, what, arch) -> None:
    golden = load_golden(GoldenStore(), case_id)
    decode, how = numerics_metadata(backend, golden, _builder_for(backend))
    assert how == what
    assert decode.plan is not None and decode.plan.params["arch"] == arch


def test_a_backend_executing_only_its_profile_passes_every_case(pytester, monkeypatch) -> None:
    broken = TritonOnly()
    real = registry.get_backend
    monkeypatch.setattr(registry, "get_backend", lambda n: broken if n == broken.name else real(n))
    from pathlib import Path

    numerics = Path(__file__).resolve().parents[3] / "tests" / "conformance" / "test_numerics.py"
    result = pytester.runpytest_inprocess(
        str(numerics), f"--backend={broken.name}", "-p", "no:cacheprovider", "-k", "tiny or kv-lt-q"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 10 and not outcomes.get("failed"), outcomes
