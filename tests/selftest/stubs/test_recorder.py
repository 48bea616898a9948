"""The recording layer proxy (`conformance.stubs.recorder`) and the stub factory built on it."""

from __future__ import annotations

import copy
import inspect
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conformance.errors import StubIncompleteError
from conformance.metadata.dims import DEEPSEEK_R1, DEEPSEEK_V2_LITE, MLADims
from conformance.stubs.factory import (
    LayerStub,
    compare_layer_protocol,
    make_layer_stub,
    stub_problems,
)
from conformance.stubs.protocol import (
    MLA_BUILDER_LAYER_PROTOCOL,
    AttentionImpl,
    AttentionLayerBase,
    MLAAttentionLayer,
    ReferencePrefillBackend,
)
from conformance.stubs.recorder import (
    CALL,
    MISSING,
    NOTHING,
    READ,
    WRITE,
    BuildSite,
    RecordingLayer,
    caller_site,
    log_of,
    record_layer,
    site_of,
    unwrap,
)

THIS_FILE = Path(__file__).name
# How the recorder displays this file: relative to the working directory when below it.
SHOWN = os.path.relpath(__file__) if not os.path.relpath(__file__).startswith("..") else __file__


def next_line() -> int:
    """The line after the caller's current line."""
    return inspect.currentframe().f_back.f_lineno + 1  # type: ignore[union-attr]


def real_layer() -> MLAAttentionLayer:
    """A real DeepSeek-R1 layer with 16 heads."""
    return MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=16)


# ---------------------------------------------------------------------------- recording


def test_nested_reads_and_calls_are_recorded_as_dotted_paths():
    proxy = record_layer(real_layer(), name="attn")
    backend = proxy.prefill_backend.clone()
    heads = proxy.impl.num_heads
    log = log_of(proxy)
    assert log.reads() == {"prefill_backend", "prefill_backend.clone", "impl", "impl.num_heads"}
    assert log.calls == {"prefill_backend.clone"}
    assert [(e.path, e.kind) for e in log.events] == [
        ("prefill_backend", READ),
        ("prefill_backend.clone", READ),
        ("prefill_backend.clone", CALL),
        ("impl", READ),
        ("impl.num_heads", READ),
    ]
    assert type(backend) is ReferencePrefillBackend, "a call must return the real result"
    assert heads == 16 and type(heads) is int


def test_leaf_values_come_back_unwrapped():
    tensor = torch.ones(2)
    proxy = record_layer(SimpleNamespace(rank=512, scale=tensor, dtype=torch.bfloat16, name="x"))
    assert proxy.rank + 64 == 576
    assert proxy.scale is tensor and proxy.dtype is torch.bfloat16 and proxy.name == "x"
    assert log_of(proxy).reads() == {"rank", "scale", "dtype", "name"}


def test_non_leaf_values_are_wrapped_and_unwrap_gives_them_back():
    layer = real_layer()
    proxy = record_layer(layer)
    impl = proxy.impl
    assert type(impl) is RecordingLayer
    assert unwrap(impl) is layer.impl and unwrap(proxy) is layer
    assert log_of(impl) is log_of(proxy), "nested proxies share the root's log"
    assert not callable(impl) and callable(proxy.prefill_backend.clone)


def test_proxy_answers_isinstance_like_its_target():
    assert isinstance(record_layer(real_layer()), AttentionLayerBase)
    assert isinstance(record_layer(make_layer_stub(DEEPSEEK_R1)), AttentionLayerBase)
    assert not isinstance(record_layer(SimpleNamespace(q_lora_rank=1)), AttentionLayerBase)
    assert not isinstance(record_layer(NOTHING), AttentionLayerBase)


def test_phases_split_the_read_set():
    proxy = record_layer(real_layer())
    log = log_of(proxy)
    with log.phase("init"):
        _ = proxy.kv_lora_rank
    with log.phase("build"):
        _ = proxy.qk_rope_head_dim
    assert log.reads(phase="init") == {"kv_lora_rank"}
    assert log.reads(phase="build") == {"qk_rope_head_dim"}
    assert log.reads() == {"kv_lora_rank", "qk_rope_head_dim"}
    log.clear()
    assert not log.events


def test_writes_are_recorded_and_reach_the_target():
    layer = real_layer()
    proxy = record_layer(layer)
    proxy.kv_cache_dtype = "fp8"
    assert layer.kv_cache_dtype == "fp8"
    assert log_of(proxy).writes == {"kv_cache_dtype"} and not log_of(proxy).reads()
    assert [e.kind for e in log_of(proxy).events] == [WRITE]


def test_dunder_probes_are_not_layer_reads():
    proxy = record_layer(real_layer())
    assert not hasattr(proxy, "__deepcopy__")
    assert not log_of(proxy).events


def test_log_of_rejects_other_objects():
    with pytest.raises(TypeError, match="recording proxy"):
        log_of(real_layer())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- modes


def test_strict_missing_attribute_names_path_stub_and_site():
    line = next_line()
    proxy = record_layer(SimpleNamespace(kv_lora_rank=512), name="placeholder")
    with pytest.raises(StubIncompleteError) as exc:
        _ = proxy.q_lora_rank
    error = exc.value
    assert isinstance(error, AttributeError)
    assert (error.path, error.name) == ("q_lora_rank", "q_lora_rank")
    assert str(error) == (
        "layer stub SimpleNamespace 'placeholder' has no attribute 'q_lora_rank' "
        f"(stub built at an unknown place; recorded from {SHOWN}:{line} "
        "(in test_strict_missing_attribute_names_path_stub_and_site)); "
        "a builder read it (strict recording)"
    )
    assert log_of(proxy).missing == {"q_lora_rank"}


def test_strict_nested_missing_attribute_names_the_whole_path():
    proxy = record_layer(SimpleNamespace(prefill_backend=object()), name="attn")
    with pytest.raises(StubIncompleteError, match=r"'prefill_backend\.clone'") as exc:
        proxy.prefill_backend.clone()
    assert exc.value.path == "prefill_backend.clone"
    assert exc.value.name == "clone"
    assert log_of(proxy).reads() == {"prefill_backend", "prefill_backend.clone"}
    assert not log_of(proxy).calls


def test_strict_error_names_the_given_build_site():
    site = BuildSite("tests/kernels/test_x.py", 42, "_build_decode_metadata")
    proxy = record_layer(NOTHING, name="placeholder", built_at=site)
    with pytest.raises(StubIncompleteError) as exc:
        _ = proxy.prefill_backend
    assert "<nothing> 'placeholder'" in str(exc.value)
    assert "stub built at tests/kernels/test_x.py:42 (in _build_decode_metadata)" in str(exc.value)
    assert exc.value.built_at == site


def test_lenient_mode_behaves_like_the_plain_object_and_logs_what_is_missing():
    stub = SimpleNamespace(kv_lora_rank=512)
    proxy = record_layer(stub, strict=False)
    with pytest.raises(AttributeError) as exc:
        _ = proxy.q_lora_rank
    assert not isinstance(exc.value, StubIncompleteError)
    assert not hasattr(proxy, "v_head_dim")
    assert getattr(proxy, "dcp_manager", None) is None
    assert proxy.kv_lora_rank == 512
    log = log_of(proxy)
    assert log.missing == {"q_lora_rank", "v_head_dim", "dcp_manager"}
    assert log.reads() == {"q_lora_rank", "v_head_dim", "dcp_manager", "kv_lora_rank"}
    assert [e.kind for e in log.events] == [MISSING, MISSING, MISSING, READ]


def test_strict_mode_still_lets_getattr_defaults_work_but_logs_them():
    proxy = record_layer(SimpleNamespace())
    assert getattr(proxy, "dcp_manager", None) is None  # StubIncompleteError is an AttributeError
    assert log_of(proxy).missing == {"dcp_manager"}


def test_proxy_around_nothing_records_the_first_read_then_fails():
    proxy = record_layer(NOTHING, name="empty")
    with pytest.raises(StubIncompleteError, match="'prefill_backend'"):
        _ = proxy.prefill_backend
    lenient = record_layer(NOTHING, strict=False)
    for name in sorted(MLA_BUILDER_LAYER_PROTOCOL):
        assert not hasattr(lenient, name)
    assert log_of(lenient).missing == MLA_BUILDER_LAYER_PROTOCOL


def test_an_error_raised_by_the_stub_itself_is_kept():
    stub = make_layer_stub(DEEPSEEK_R1, omit=["v_head_dim"])
    proxy = record_layer(stub, name="attn")
    with pytest.raises(StubIncompleteError) as exc:
        _ = proxy.v_head_dim
    assert f"{THIS_FILE}:" in str(exc.value) and "recorded from" not in str(exc.value)
    assert log_of(proxy).missing == {"v_head_dim"}


# ---------------------------------------------------------------------------- sites


def test_caller_site_and_site_of():
    def helper() -> BuildSite:
        return caller_site()

    line = next_line()
    site = helper()
    assert site == BuildSite(SHOWN, line, "test_caller_site_and_site_of")
    assert site_of(real_layer()) is None
    line = next_line()
    stub = make_layer_stub(DEEPSEEK_R1)
    assert site_of(stub) == BuildSite(SHOWN, line, "test_caller_site_and_site_of")


# ---------------------------------------------------------------------------- stub factory


@pytest.mark.parametrize("model", [DEEPSEEK_R1, DEEPSEEK_V2_LITE], ids=lambda m: m.name)
def test_stub_dims_come_from_the_model_config(model):
    stub = make_layer_stub(model)
    assert isinstance(stub, LayerStub) and isinstance(stub, AttentionLayerBase)
    for name, value in vars(model.dims).items():
        assert getattr(stub, name) == value
    assert type(stub.prefill_backend) is ReferencePrefillBackend
    assert not stub_problems(stub, MLA_BUILDER_LAYER_PROTOCOL)
    assert {k for k in vars(stub) if not k.startswith("_")} == {
        "prefill_backend",
        *vars(model.dims),
    }


def test_stub_from_dims_or_preset_name():
    dims = MLADims(None, 256, 64, 32, 64)
    assert make_layer_stub(dims).kv_lora_rank == 256
    assert make_layer_stub("deepseek-ai/DeepSeek-V2-Lite").q_lora_rank is None


def test_stub_extra_attributes_and_protocol_driven_attributes():
    stub = make_layer_stub(
        DEEPSEEK_R1, protocol=MLA_BUILDER_LAYER_PROTOCOL | {"impl.num_heads"}, dcp_manager="m"
    )
    assert stub.dcp_manager == "m"
    assert isinstance(stub.impl, AttentionImpl) and stub.impl.num_heads == 128
    assert stub.impl.scale == pytest.approx(192**-0.5)
    heads = make_layer_stub(DEEPSEEK_R1.dims, protocol={"impl.num_heads"}, num_heads=8)
    assert heads.impl.num_heads == 8 and heads.num_heads == 8


def test_stub_lacking_an_attribute_raises_naming_it_and_its_site():
    line = next_line()
    stub = make_layer_stub(DEEPSEEK_R1)
    with pytest.raises(StubIncompleteError) as exc:
        _ = stub.dcp_manager
    assert exc.value.path == "dcp_manager"
    assert str(exc.value) == (
        "layer stub LayerStub 'deepseek-ai/DeepSeek-R1' has no attribute 'dcp_manager' "
        f"(stub built at {SHOWN}:{line} "
        "(in test_stub_lacking_an_attribute_raises_naming_it_and_its_site))"
    )
    assert not hasattr(stub, "dcp_manager")


def test_omitting_a_nested_path_hides_it_on_a_copy():
    stub = make_layer_stub(DEEPSEEK_R1, omit=["prefill_backend.clone"])
    assert isinstance(stub.prefill_backend, ReferencePrefillBackend)
    with pytest.raises(StubIncompleteError, match=r"'prefill_backend\.clone'") as exc:
        stub.prefill_backend.clone()
    assert exc.value.path == "prefill_backend.clone"
    assert "left out on purpose" in str(exc.value)
    assert ReferencePrefillBackend().clone() is not None, "the class itself is untouched"
    assert [p.path for p in stub_problems(stub, MLA_BUILDER_LAYER_PROTOCOL)] == [
        "prefill_backend.clone"
    ]
    assert copy.copy(stub).q_lora_rank == 1536


def test_factory_rejects_what_it_cannot_build():
    with pytest.raises(ValueError, match="no standard value for protocol attribute 'dcp_manager'"):
        make_layer_stub(DEEPSEEK_R1, protocol={"dcp_manager"})
    with pytest.raises(ValueError, match="number of heads is unknown"):
        make_layer_stub(DEEPSEEK_R1.dims, protocol={"impl"})
    with pytest.raises(ValueError, match=r"'prefill_backend\.run'"):
        make_layer_stub(DEEPSEEK_R1, protocol={"prefill_backend.run"})
    with pytest.raises(ValueError, match="omit names 'q_lora'"):
        make_layer_stub(DEEPSEEK_R1, omit=["q_lora"])


# ---------------------------------------------------------------------------- diffs


def test_protocol_diff_lists_both_directions():
    diff = compare_layer_protocol(declared={"a", "b"}, recorded={"b", "c"})
    assert (diff.undeclared, diff.unread, diff.ok) == ({"c"}, {"a"}, False)
    text = diff.render(backend="demo")
    assert "+ c" in text and "- a" in text and "backend 'demo'" in text
    assert compare_layer_protocol(declared={"a"}, recorded={"a"}).ok
