"""Negative controls of family B: incomplete stubs, a builder that reads more, stand-ins.

Each control is a deliberately broken stub, builder or declaration that the stub checks
(dynamic, recorded and static) must reject, naming the attribute. The stubs below are
broken on purpose; their lines carry ``conformance-audit: ignore`` so that family B's
audit of tests/ does not report them.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from backends import registry
from backends.base import BuilderConfig, KVCacheSpec, MetadataBuilder
from backends.cpu import CpuReferenceBackend, CpuReferenceBuilder
from conformance.errors import StubIncompleteError
from conformance.metadata import batch
from conformance.metadata.dims import DEEPSEEK_R1, MODEL_PRESETS, get_mla_dims
from conformance.metadata.record import CommonAttentionMetadata
from conformance.stubs import factory as stubs_module
from conformance.stubs.factory import (
    compare_layer_protocol,
    record_builder_reads,
)
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL, AttentionImpl, MLAAttentionLayer
from conformance.stubs.recorder import site_of

FAMILY_B = Path(__file__).resolve().parents[2] / "conformance" / "test_stubs.py"
THIS_FILE = Path(__file__).name
LAYER = "placeholder"
CONFIG = BuilderConfig(kv_cache=KVCacheSpec(block_size=16), max_model_len=4096, max_num_seqs=64)


def run_family_b(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run family B in-process against the current (patched) implementation."""
    return pytester.runpytest_inprocess(str(FAMILY_B), "-p", "no:cacheprovider", *args)


def family_b_fails(
    pytester: pytest.Pytester, select: str, *lines: str, failed: int, backend: str = "cpu"
) -> pytest.RunResult:
    """Family B's tests matching `select` fail `failed` times, printing `lines` in order."""
    result = run_family_b(pytester, "--backend", backend, "-k", select)
    assert result.parseoutcomes().get("failed", 0) == failed, result.parseoutcomes()
    result.stdout.fnmatch_lines(list(lines), consecutive=False)
    return result


def mixed_batch() -> CommonAttentionMetadata:
    """Two decodes and two prefills with context."""
    return batch.make_cam(batch.BATCH_SPECS["mixed_small"], block_size=16)


def cpu_builder(builder_cls: type[MetadataBuilder] = CpuReferenceBuilder):
    """``context -> builder`` for `builder_cls` over the layer called `LAYER`."""
    return lambda context: builder_cls(CONFIG, [LAYER], context)


# ---------------------------------------------------------------------------- builders


class ReadsKvCacheDtypeBuilder(CpuReferenceBuilder):
    """Starts reading one more layer attribute in ``__init__``."""

    def __init__(
        self, config: BuilderConfig, layer_names: list[str], context: Mapping[str, Any]
    ) -> None:
        super().__init__(config, layer_names, context)
        self.kv_cache_dtype = context[layer_names[0]].kv_cache_dtype


class ReadsImplHeadsBuilder(CpuReferenceBuilder):
    """Starts reading a nested layer attribute in ``build()``."""

    def __init__(
        self, config: BuilderConfig, layer_names: list[str], context: Mapping[str, Any]
    ) -> None:
        super().__init__(config, layer_names, context)
        self._layer = context[layer_names[0]]

    def build(self, cam: CommonAttentionMetadata):
        assert self._layer.impl.num_heads > 0
        return super().build(cam)


@pytest.mark.parametrize(
    ("builder_cls", "phase", "undeclared"),
    [
        (ReadsKvCacheDtypeBuilder, "init", {"kv_cache_dtype"}),
        (ReadsImplHeadsBuilder, "build", {"impl", "impl.num_heads"}),
    ],
    ids=["init:kv_cache_dtype", "build:impl.num_heads"],
)
def test_protocol_diff_names_a_new_read(builder_cls, phase, undeclared):
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=16)
    log = record_builder_reads(cpu_builder(builder_cls), layer, [mixed_batch()], layer_name=LAYER)
    diff = compare_layer_protocol(declared=CpuReferenceBackend.layer_protocol, recorded=log.reads())
    assert diff.undeclared == undeclared
    assert not diff.unread
    text = diff.render(backend="cpu", log=log)
    for path in undeclared:
        assert f"+ {path}" in text and f"read during {phase}" in text, text

    control = record_builder_reads(cpu_builder(), layer, [mixed_batch()], layer_name=LAYER)
    assert compare_layer_protocol(
        declared=CpuReferenceBackend.layer_protocol, recorded=control.reads()
    ).ok


class ReadsMoreBackend(CpuReferenceBackend):
    """The reference backend whose builder reads `kv_cache_dtype` without declaring it."""

    name: ClassVar[str] = "reads-more"

    def builder_cls(self) -> type[MetadataBuilder]:
        return ReadsKvCacheDtypeBuilder


class StaleDeclarationBackend(CpuReferenceBackend):
    """The reference backend declaring an attribute its builder never reads."""

    name: ClassVar[str] = "stale-declaration"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL | {"kv_cache_dtype"}


def register(monkeypatch: pytest.MonkeyPatch, broken: CpuReferenceBackend) -> None:
    """Make `registry.get_backend` return `broken` for its name."""
    real = registry.get_backend
    monkeypatch.setattr(
        registry, "get_backend", lambda name: broken if name == broken.name else real(name)
    )


def test_family_b_passes_on_the_reference_backend(pytester):
    result = run_family_b(pytester, "--backend", "cpu")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 10 and not outcomes.get("failed"), outcomes


def test_builder_reading_a_new_attribute_fails_family_b(pytester, monkeypatch):
    register(monkeypatch, ReadsMoreBackend())
    family_b_fails(
        pytester,
        "reads_exactly or minimal_complete_stub",
        "*+ kv_cache_dtype*read during init, not declared*",
        "*StubIncompleteError*'kv_cache_dtype'*",
        failed=2,
        backend="reads-more",
    )


def test_stale_declaration_fails_family_b(pytester, monkeypatch):
    register(monkeypatch, StaleDeclarationBackend())
    result = run_family_b(
        pytester, "--backend", "stale-declaration", "-k", "reads_exactly or missing_one", "-v"
    )
    result.stdout.fnmatch_lines(
        [
            "*test_stub_missing_one_attribute_fails_naming_it[[]kv_cache_dtype[]] FAILED*",
            "*- kv_cache_dtype*declared, never read*",
            "*ran with a stub lacking 'kv_cache_dtype'*",
        ],
        consecutive=False,
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 2, outcomes
    assert outcomes.get("passed", 0) == len(MLA_BUILDER_LAYER_PROTOCOL), outcomes


# ---------------------------------------------------------------------------- stand-ins


def test_object_new_layer_missing_prefill_backend_is_caught(traced_allocations):
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    layer = object.__new__(MLAAttentionLayer)  # conformance-audit: ignore[STUB004]
    layer.dims = DEEPSEEK_R1.dims  # __init__ skipped: prefill_backend is never set
    layer.num_heads = 16
    with pytest.raises(StubIncompleteError) as exc:
        record_builder_reads(cpu_builder(), layer, [mixed_batch()], layer_name=LAYER)
    assert exc.value.path == "prefill_backend"
    message = str(exc.value)
    assert f"MLAAttentionLayer {LAYER!r}" in message
    if site_of(layer) is not None:  # tracemalloc sees plain-class instances from 3.12 on
        assert f"{THIS_FILE}:{line}" in message, message
    else:
        assert "an unknown place; recorded from " in message and THIS_FILE in message, message


def test_object_new_impl_missing_num_heads_is_caught():
    impl = object.__new__(AttentionImpl)  # conformance-audit: ignore[STUB004]
    impl.scale = 0.1  # #51011: a stand-in impl that never got the attribute a reader needs
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=16, impl=impl)
    with pytest.raises(StubIncompleteError, match=r"'impl\.num_heads'") as exc:
        record_builder_reads(
            cpu_builder(ReadsImplHeadsBuilder), layer, [mixed_batch()], layer_name=LAYER
        )
    assert exc.value.path == "impl.num_heads"


# ---------------------------------------------------------------------------- family B checks


class MalformedDeclarationBackend(CpuReferenceBackend):
    """BROKEN: declares a path that is no dotted identifier and a child without its parent."""

    name: ClassVar[str] = "malformed-declaration"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL | {
        "kv-lora-rank",
        "quant_method.scale",
    }


def test_malformed_declaration_fails_family_b(pytester, monkeypatch):
    register(monkeypatch, MalformedDeclarationBackend())
    lines = ["*not dotted identifiers: [[]'kv-lora-rank'[]]*"]
    family_b_fails(
        pytester, "protocol_is_well_formed", *lines, failed=1, backend="malformed-declaration"
    )

    class OrphanOnly(CpuReferenceBackend):
        name: ClassVar[str] = "orphan-declaration"
        layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL | {
            "quant_method.scale"
        }

    register(monkeypatch, OrphanOnly())
    lines = ["*parent path declared too: [[]'quant_method.scale'[]]*"]
    family_b_fails(pytester, "protocol_is_well_formed", *lines, failed=1, backend=OrphanOnly.name)


def test_stub_factory_with_fixed_dims_fails_family_b(pytester, monkeypatch):
    real = stubs_module._dims_and_heads

    def always_r1_dims(source: Any) -> tuple[Any, int | None, str]:
        """BROKEN (#52139's shape): the stub's dims ignore the checkpoint it is made for."""
        _, heads, label = real(source)
        return get_mla_dims(DEEPSEEK_R1), heads, label

    monkeypatch.setattr(stubs_module, "_dims_and_heads", always_r1_dims)
    differing = [
        name
        for name, model in MODEL_PRESETS.items()
        if get_mla_dims(model) != get_mla_dims(DEEPSEEK_R1)
    ]
    assert differing, "some preset must have dims other than DeepSeek-R1's"
    line = f"*{differing[0]}: stub * get_mla_dims *, real layer *"
    family_b_fails(pytester, "stub_dims_follow_the_checkpoint", line, failed=len(differing))


def test_incomplete_suite_stub_factory_fails_family_b(pytester, monkeypatch):
    real = stubs_module.make_layer_stub

    def forgets_v_head_dim(*args: Any, **kwargs: Any) -> Any:
        """BROKEN: the suite's stub factory leaves `v_head_dim` out."""
        return real(*args, **{**kwargs, "omit": [*kwargs.get("omit", ()), "v_head_dim"]})

    monkeypatch.setattr(stubs_module, "make_layer_stub", forgets_v_head_dim)
    select, line = "suite_stub_factories_make_complete_stubs", "*StubIncompleteError*'v_head_dim'*"
    result = family_b_fails(pytester, select, line, failed=len(MODEL_PRESETS) + 1)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) == 1, outcomes  # conftest.make_layer_context: a real layer
