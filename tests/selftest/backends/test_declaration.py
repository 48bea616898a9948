"""`Backend`'s declaration: defaults fit a plan-free backend; what applies follows from it."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from backends import registry
from backends.base import (
    AITER_V1,
    TARGET_FACTS,
    Availability,
    Backend,
    BuilderConfig,
    KVCacheSpec,
)
from backends.common import PlanFreeBuilder
from conformance.metadata.batch import BATCH_SPECS, make_cam
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL, MLAAttentionLayer
from conformance.target_types import BackendTarget
from conformance.targets import BUILTIN_TARGETS, CPU, DEVICE_KINDS, builtin_backends, load_class

pytestmark = pytest.mark.selftest

LAYER = "model.layers.0.self_attn.attn"


class Minimal(Backend):
    """Only what a plan-free backend must say."""

    name: ClassVar[str] = "minimal"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL

    def availability(self) -> Availability:
        return Availability(True)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def builder_cls(self):
        return PlanFreeBuilder


def test_defaults_declare_a_plan_free_bf16_backend() -> None:
    backend = Minimal()
    assert backend.plan_format is None and backend.plan_archs() == ()
    assert backend.check_declaration() == []
    assert backend.declaration() == (
        "plan_format=None, q_dtypes=(bf16), kv_dtypes=(bf16), numerics=fp32-reference"
    )
    assert backend.plan_contract_skip() == "not applicable: minimal declares plan_format=None"
    assert backend.dtype_skip(torch.bfloat16, torch.bfloat16) is None
    assert backend.dtype_skip(torch.bfloat16, torch.float8_e4m3fn) == (
        "not applicable: minimal declares kv_dtypes=(bf16), the case has kv e4m3fn"
    )


def test_a_backend_that_plans_nothing_builds_metadata_without_a_plan() -> None:
    backend = Minimal()
    config = BuilderConfig(kv_cache=KVCacheSpec(block_size=16), arch="gfx942")
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=16)
    builder = backend.make_builder(config, [LAYER], {LAYER: layer})  # no IndexError
    assert builder.config.arch is None  # a plan-free builder gets no planner profile
    meta = builder.build(make_cam(BATCH_SPECS["padded_decode"], block_size=16))
    assert meta.decode is not None and meta.decode.plan is None
    assert meta.decode.kv_indptr.tolist() == [0, 3, 8]


def test_undecodable_decode_names_the_backend() -> None:
    with pytest.raises(NotImplementedError, match="backend minimal: implement decode"):
        Minimal().decode(torch.zeros(1), torch.zeros(1), None, sm_scale=1.0)  # type: ignore[arg-type]


def test_bad_declarations_are_named() -> None:
    class Bad(Minimal):
        name: ClassVar[str] = "has-hyphens"
        plan_format: ClassVar[str | None] = "aiter-v2"
        q_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float16,)

    problems = Bad().check_declaration()
    assert any(p.startswith("plan_format:") for p in problems)
    assert any(p.startswith("q_dtypes:") for p in problems)
    assert any(p.startswith("name:") for p in problems)


@pytest.mark.parametrize("name", ["cpu", "interpret", "cuda", "rocm", "flashinfer"])
def test_shipped_backends_declare_validly(name: str) -> None:
    backend = registry.get_backend(name)
    assert backend.check_declaration() == [], backend.declaration()
    planned = name in ("cpu", "interpret", "cuda", "rocm")
    assert (backend.plan_format == AITER_V1) is planned


class NoQDtypes(Minimal):
    """BROKEN: claims no q dtype, so every numerics case would be 'not applicable'."""

    name: ClassVar[str] = "no_q_dtypes"
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = ()


def test_the_registry_refuses_a_backend_that_declares_itself_wrongly(monkeypatch) -> None:
    target = f"{__name__}:NoQDtypes"
    declaration = BackendTarget(
        name="no_q_dtypes", description="broken", class_path=target, device=CPU
    )
    monkeypatch.setitem(BUILTIN_TARGETS, "no_q_dtypes", declaration)
    monkeypatch.setattr(registry, "load_class", lambda _: NoQDtypes)
    registry.get_backend.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"'no_q_dtypes'.*declares itself wrongly: q_dtypes"):
            registry.get_backend("no_q_dtypes")
        assert "no_q_dtypes" not in registry.available_backends()
    finally:
        registry.get_backend.cache_clear()


class CpuWithItsOwnFacts(Minimal):
    """BROKEN: a built-in backend's class declaring device facts its target entry holds."""

    name: ClassVar[str] = "cpu"
    device_kind: ClassVar[str | None] = "cuda"
    environment: ClassVar[dict[str, str]] = {"OMP_NUM_THREADS": "8"}


def test_a_built_in_backend_s_device_facts_live_in_its_target_entry_only() -> None:
    assert CpuWithItsOwnFacts().check_declaration() == [
        "device_kind: on the class; a built-in backend's is its conformance/targets.py entry",
        "environment: on the class; a built-in backend's is its conformance/targets.py entry",
    ]
    for name in builtin_backends():
        backend_class = load_class(builtin_backends()[name])
        assert all(getattr(backend_class, fact) == getattr(Backend, fact) for fact in TARGET_FACTS)


def test_a_plug_in_s_device_kind_must_be_a_declared_kind() -> None:
    class OnAnUnknownDevice(Minimal):
        device_kind: ClassVar[str | None] = "tpu"

    assert OnAnUnknownDevice().check_declaration() == [
        f"device_kind: expected one of {sorted(DEVICE_KINDS)}"
    ]
