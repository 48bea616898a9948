"""Fixtures shared by the conformance families: layers, builder configs, builders, goldens."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch

from backends import registry
from backends.base import Backend, BuilderConfig, DecodeMetadata, KVCacheSpec, MetadataBuilder
from conformance.goldens import Golden, GoldenCase, GoldenStore, load_golden
from conformance.goldens.assertions import Capabilities, assert_result_matches, run_decode
from conformance.harness.plugin import chosen_backend
from conformance.metadata.dims import DEEPSEEK_R1, ModelConfig
from conformance.stubs.protocol import MLAAttentionLayer

LAYER_NAME = "model.layers.0.self_attn.attn"


def make_layer_context(model: ModelConfig = DEEPSEEK_R1, num_heads: int = 16) -> dict[str, Any]:
    """A `static_forward_context` holding one real MLA layer."""
    return {LAYER_NAME: MLAAttentionLayer(dims=model.dims, num_heads=num_heads)}


@pytest.fixture
def builder_config(backend: Backend) -> Callable[..., BuilderConfig]:
    """Factory of builder configs on the backend's device."""

    def make(*, block_size: int = 16, **changes: Any) -> BuilderConfig:
        base = BuilderConfig(
            kv_cache=KVCacheSpec(block_size=block_size, dtype=torch.bfloat16),
            device=str(backend.device),
            max_model_len=4096,
            max_num_seqs=64,
        )
        return replace(base, **changes)

    return make


@pytest.fixture
def make_builder(
    backend: Backend, builder_config: Callable[..., BuilderConfig]
) -> Callable[..., MetadataBuilder]:
    """Factory of the backend's builder over a context holding one real layer."""

    def make(context: dict[str, Any] | None = None, **config: Any) -> MetadataBuilder:
        ctx = make_layer_context() if context is None else context
        return backend.make_builder(builder_config(**config), [LAYER_NAME], ctx)

    return make


@pytest.fixture
def layer_protocol(backend: Backend) -> frozenset[str]:
    """Dotted attribute paths the backend declares its builder reads from layers."""
    return frozenset(backend.layer_protocol)


@pytest.fixture
def layer_name() -> str:
    """The name `make_builder` looks its layer up by in the `static_forward_context`."""
    return LAYER_NAME


@pytest.fixture
def real_layer() -> MLAAttentionLayer:
    """A real MLA layer, as `make_layer_context` registers it (DeepSeek-R1 dims, 16 heads)."""
    return make_layer_context()[LAYER_NAME]


# --------------------------------------------------------------------------------------
# Golden cases (tests/conformance/test_numerics.py and test_plan.py)

Selector = Callable[[GoldenCase, Capabilities], bool]
PLAN_SELECTORS: dict[str, Selector] = {
    # the backend's builder must reproduce the golden plan
    "plan_id": lambda case, caps: caps.plans(case, case.num_cus),
    # the spy replay (vLLM's fp8 golden test) needs an fp8 q or cache
    "spy_id": lambda case, caps: caps.plans(case, case.num_cus) and case.has_fp8,
    # plan invariance: the same batch planned for another program count
    "replan_id": lambda case, caps: case.via_builder and caps.decodes(case),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the golden-case fixtures from the manifest, ids = case ids.

    ``golden_id`` (the numerics contract) takes every case, for every backend. The plan
    fixtures take the cases a plan-format backend can plan or execute; for a plan-free
    backend they take every case, each skipped as not applicable by the harness.
    """
    wanted = [n for n in ("golden_id", *PLAN_SELECTORS) if n in metafunc.fixturenames]
    if not wanted:
        return
    manifest = GoldenStore().read_manifest()
    cases = [GoldenCase.from_json(entry.case) for entry in manifest.entries.values()]
    try:
        backend = registry.get_backend(chosen_backend(metafunc.config))
    except Exception:  # unknown or broken backend: the plugin reports it
        backend = None
    if backend is not None and backend.tiny_cases_only:
        cases = [case for case in cases if case.tiny]
    caps = Capabilities.of(backend) if backend is not None else Capabilities()
    plan_free = backend is None or backend.plan_format is None
    for name in wanted:
        select = PLAN_SELECTORS.get(name)
        if select is None or plan_free:
            ids = [case.id for case in cases]
        else:
            ids = [case.id for case in cases if select(case, caps)]
        metafunc.parametrize(name, ids, ids=ids)


@pytest.fixture(scope="module", autouse=True)
def one_thread_per_xdist_worker() -> Iterator[None]:
    """Under pytest-xdist, run torch single-threaded while a module runs.

    Several workers with one intra-op thread per core each oversubscribe the CPU; with
    OpenMP's spinning threads the CPU decodes ran ~10x slower (measured on 2 cores).
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def golden_store() -> GoldenStore:
    """The golden directory ($MLA_CONFORMANCE_GOLDENS or tests/goldens)."""
    return GoldenStore()


@pytest.fixture(scope="session")
def goldens(golden_store: GoldenStore) -> Callable[[str], Golden]:
    """Load a golden by case id (sha256-verified once per session)."""
    loaded: dict[str, Golden] = {}

    def load(case_id: str) -> Golden:
        if case_id not in loaded:
            loaded[case_id] = load_golden(golden_store, case_id)
        return loaded[case_id]

    return load


@pytest.fixture
def record_errors(request: pytest.FixtureRequest) -> Callable[[str, object], None]:
    """Record a JUnit property of this test (``user_properties``: unlike the
    ``record_property`` fixture, no warning under the default xunit2 family)."""
    return lambda name, value: request.node.user_properties.append((name, value))


@pytest.fixture
def assert_decode_matches(
    backend: Backend, record_errors: Callable[[str, object], None]
) -> Callable[[Golden, DecodeMetadata, str], None]:
    """``(golden, decode, what)``: run the backend's decode of the golden's batch over the
    `decode` metadata (`what` names it) and assert its output and LSE match the golden within
    the derived tolerance; the errors are recorded as JUnit properties."""

    def check(golden: Golden, decode: DecodeMetadata, what: str) -> None:
        __tracebackhide__ = True
        out, lse = run_decode(backend, golden, decode)
        assert_result_matches(
            out=out, lse=lse, golden=golden, backend=backend, record=record_errors, what=what
        )

    return check


@pytest.fixture
def golden_builder(
    backend: Backend, layer_name: str
) -> Callable[..., tuple[MetadataBuilder, Callable[[], DecodeMetadata]]]:
    """The backend's real builder for a golden, and a function building its batch."""

    def make(golden: Golden, **changes: Any) -> tuple[MetadataBuilder, Callable[[], Any]]:
        layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=golden.case.heads)
        config = golden.builder_config(backend.device, **changes)
        builder = backend.make_builder(config, [layer_name], {layer_name: layer})

        def build() -> DecodeMetadata:
            meta = builder.build(golden.cam(backend.device))
            assert meta.decode is not None, (
                f"case {golden.case.id}: the builder produced no decode metadata "
                f"(num_decodes={meta.num_decodes})"
            )
            return meta.decode

        return builder, build

    return make
