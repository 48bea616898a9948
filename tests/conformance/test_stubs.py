"""Family B: stub completeness (what a builder reads from layers, and stubs that carry it).

vLLM #51255 made the MLA builder read five dims from the layer objects; one test's
`SimpleNamespace` stub was not updated and CI broke (#52139). Here the backend's builder
runs against a recording layer, its read set must equal its declared `layer_protocol`, and
every layer stub in tests/ and benchmarks/ must carry that protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backends.base import MetadataBuilder
from conformance.audit import LayerProtocol, run_audit
from conformance.audit.protocol import is_attribute_path
from conformance.errors import StubIncompleteError
from conformance.metadata import batch
from conformance.metadata.dims import DEEPSEEK_R1, MODEL_PRESETS, get_mla_dims
from conformance.stubs.factory import (
    assert_layer_protocol_matches,
    make_layer_stub,
    record_builder_reads,
    require_complete_stub,
)
from conformance.stubs.protocol import (
    MLA_BUILDER_LAYER_PROTOCOL,
    AttentionLayerBase,
    MLAAttentionLayer,
)
from conformance.stubs.recorder import log_of, record_layer

REPO = Path(__file__).resolve().parents[2]
STUB_AUDIT_PATHS = ("tests", "benchmarks")
BLOCK_SIZE = 16
# Two decodes and two prefills with context: the decode plan and the chunked prefill both run.
MIXED_BATCH = "mixed_small"


def declared_protocol(backend_name: str) -> frozenset[str]:
    """The layer protocol of `backend_name`, or the MLA builders' one if it is unknown."""
    from backends.registry import get_backend

    try:
        return frozenset(get_backend(backend_name).layer_protocol)
    except KeyError:
        return MLA_BUILDER_LAYER_PROTOCOL


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One leave-one-out case per protocol attribute, with the attribute path as its id."""
    if "protocol_attribute" in metafunc.fixturenames:
        attributes = sorted(declared_protocol(metafunc.config.getoption("backend")))
        metafunc.parametrize("protocol_attribute", attributes, ids=attributes)


@pytest.fixture
def mixed_batch(backend):
    """A mixed decode/prefill batch on the backend's device."""
    spec = batch.BATCH_SPECS[MIXED_BATCH]
    return batch.make_cam(spec, block_size=BLOCK_SIZE, device=backend.device)


@pytest.fixture
def builder_over(make_builder) -> Callable[[dict[str, Any]], MetadataBuilder]:
    """The backend's builder over a given `static_forward_context`."""
    return lambda context: make_builder(context, block_size=BLOCK_SIZE)


def test_declared_protocol_is_well_formed(layer_protocol):
    assert layer_protocol, "layer_protocol is empty: the builder reads nothing from layers?"
    bad = sorted(p for p in layer_protocol if not is_attribute_path(p))
    assert not bad, f"layer_protocol has paths that are not dotted identifiers: {bad}"
    orphans = sorted(
        p for p in layer_protocol if "." in p and p.rsplit(".", 1)[0] not in layer_protocol
    )
    assert not orphans, f"reading these needs their parent path declared too: {orphans}"


def test_builder_reads_exactly_its_layer_protocol(
    backend_name, layer_protocol, builder_over, mixed_batch, real_layer, layer_name
):
    log = record_builder_reads(builder_over, real_layer, [mixed_batch], layer_name=layer_name)
    assert log.reads(phase="init") or log.reads(phase="build"), "no layer read was recorded"
    assert not log.missing, f"the real layer lacks {sorted(log.missing)}"
    assert_layer_protocol_matches(declared=layer_protocol, log=log, backend=backend_name)


def test_layer_stubs_in_tests_and_benchmarks_are_complete(backend_name, layer_protocol):
    protocol = LayerProtocol({backend_name: layer_protocol}, source=f"backend {backend_name}")
    paths = [REPO / p for p in STUB_AUDIT_PATHS if (REPO / p).is_dir()]
    report = run_audit(paths, audits=("stubs",), protocol=protocol)
    assert report.files_audited > 0, f"the stub audit read no file under {STUB_AUDIT_PATHS}"
    assert not report.errors, report.to_text()
    assert not report.findings, (
        f"layer stubs incomplete for backend {backend_name!r}:\n{report.to_text()}"
    )


# Every layer factory of the suite: (protocol, request) -> a layer for the context.
SUITE_STUB_FACTORIES: dict[str, Callable[[frozenset[str], pytest.FixtureRequest], Any]] = {
    **{
        f"make_layer_stub({name})": (
            lambda protocol, request, model=model: make_layer_stub(model, protocol=protocol)
        )
        for name, model in MODEL_PRESETS.items()
    },
    "make_layer_stub(MLADims)": lambda protocol, request: make_layer_stub(
        DEEPSEEK_R1.dims, protocol=protocol, num_heads=16
    ),
    "conftest.make_layer_context": lambda protocol, request: request.getfixturevalue("real_layer"),
}


@pytest.mark.parametrize("factory", list(SUITE_STUB_FACTORIES))
def test_suite_stub_factories_make_complete_stubs(
    factory, request, backend_name, layer_protocol, builder_over, mixed_batch, layer_name
):
    stub = SUITE_STUB_FACTORIES[factory](layer_protocol, request)
    require_complete_stub(stub, layer_protocol, name=factory)
    log = record_builder_reads(builder_over, stub, [mixed_batch], layer_name=layer_name)
    assert_layer_protocol_matches(declared=layer_protocol, log=log, backend=backend_name)


@pytest.mark.parametrize("preset", list(MODEL_PRESETS))
def test_stub_dims_follow_the_checkpoint(preset, layer_protocol):
    model = MODEL_PRESETS[preset]
    stub = make_layer_stub(model, protocol=layer_protocol)
    real = MLAAttentionLayer(dims=model.dims, num_heads=model.num_attention_heads)
    dims = get_mla_dims(model)
    for name, value in vars(dims).items():
        assert getattr(stub, name) == value == getattr(real, name), (
            f"{preset}: stub {name}={getattr(stub, name)}, get_mla_dims {value}, "
            f"real layer {getattr(real, name)}"
        )
    for path in sorted(layer_protocol):
        stub_value, real_value = stub, real
        for part in path.split("."):
            stub_value, real_value = getattr(stub_value, part), getattr(real_value, part)
        if isinstance(real_value, (int, float, str, type(None))):
            assert stub_value == real_value, f"{preset}: {path} is {stub_value}, not {real_value}"


def test_builder_works_with_the_minimal_complete_stub(
    backend, layer_protocol, builder_over, mixed_batch, layer_name
):
    stub = make_layer_stub(DEEPSEEK_R1, protocol=layer_protocol)
    assert isinstance(stub, AttentionLayerBase)
    public = {k for k in vars(stub) if not k.startswith("_")}
    assert public == {p.split(".", 1)[0] for p in layer_protocol}, "the stub is not minimal"

    proxy = record_layer(stub, name=layer_name)
    builder = builder_over({layer_name: proxy})
    meta = builder.build(mixed_batch)

    nd, npf, _, _ = batch.split_decodes_and_prefills(mixed_batch, 1, False)
    assert (meta.num_decodes, meta.num_prefills) == (nd, npf) == (2, 2)
    assert meta.head_dim == DEEPSEEK_R1.dims.cache_width
    assert meta.decode is not None
    if backend.plan_format is not None:
        assert meta.decode.plan is not None, "the decode rows carry no work plan"
    assert meta.prefill is not None and meta.prefill.chunked_context is not None
    if "prefill_backend.clone" in layer_protocol:
        assert meta.prefill.prefill_backend is not stub.prefill_backend, (
            "the builder shares the layer's prefill backend instead of cloning it (#46993)"
        )
    assert_layer_protocol_matches(declared=layer_protocol, log=log_of(proxy), backend=backend.name)


def test_stub_missing_one_attribute_fails_naming_it(
    protocol_attribute, layer_protocol, builder_over, mixed_batch, layer_name
):
    stub = make_layer_stub(DEEPSEEK_R1, protocol=layer_protocol, omit=[protocol_attribute])

    with pytest.raises(StubIncompleteError) as checked:
        require_complete_stub(stub, layer_protocol, name=layer_name)
    assert checked.value.path == protocol_attribute, str(checked.value)

    proxy = record_layer(stub, name=layer_name)
    try:
        builder_over({layer_name: proxy}).build(mixed_batch)
    except AttributeError as exc:
        error: AttributeError = exc
    else:
        pytest.fail(
            f"the builder ran with a stub lacking {protocol_attribute!r}: it reads it only "
            "optionally, so stubs without it silently take another path"
        )
    assert isinstance(error, StubIncompleteError), f"{type(error).__name__}: {error}"
    assert error.path == protocol_attribute, str(error)
    assert repr(protocol_attribute) in str(error)
    assert f"{Path(__file__).name}:" in str(error), f"the error does not say where: {error}"
    assert log_of(proxy).missing == {protocol_attribute}
