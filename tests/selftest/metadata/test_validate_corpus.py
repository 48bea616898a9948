"""The malformed-record corpus through `validate` and through every builder on the CPU.

Each entry of `conformance.metadata.corpus.CORRUPTIONS` must raise `MetadataError` naming
its field through `validate` with the paging facts and through each builder that runs on
the CPU: the cpu reference, the Triton builder class (no kernel is launched) and the ROCm
builder over the AITER stand-in. Every `VALID` edge case must pass each path.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from backends.base import BuilderConfig, KVCacheSpec, MetadataBuilder
from backends.cpu import CpuReferenceBuilder
from backends.triton_backend import TritonBuilder
from conformance.errors import MetadataError
from conformance.metadata import corpus
from conformance.metadata.record import CommonAttentionMetadata
from conformance.metadata.validator import validate
from conformance.stubs.protocol import MLAAttentionLayer

LAYER = "model.layers.0.self_attn.attn"
PATHS = ("validate", "cpu", "triton", "rocm-standin")


def _standin_rocm_builder(monkeypatch: pytest.MonkeyPatch) -> type[MetadataBuilder]:
    name = "mla_selftest_fake_aiter"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "backends" / "fake_aiter.py"
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    backend, _ = sys.modules[name].install_standin_backend(monkeypatch)
    return backend.builder_cls()


def _build_with(cls: type[MetadataBuilder]) -> Callable[[CommonAttentionMetadata], object]:
    kv = KVCacheSpec(block_size=corpus.BLOCK_SIZE, num_blocks=corpus.NUM_BLOCKS)
    config = BuilderConfig(kv_cache=kv, max_model_len=4096, max_num_seqs=64)
    layer = MLAAttentionLayer(dims=config.model.dims, num_heads=config.num_heads)
    return cls(config, [LAYER], {LAYER: layer}).build


@pytest.fixture(params=PATHS)
def check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """The path a record goes through: `validate` with the paging facts, or a builder."""
    if request.param == "validate":
        return lambda cam: validate(cam, block_size=corpus.BLOCK_SIZE, num_blocks=corpus.NUM_BLOCKS)
    if request.param == "rocm-standin":
        return _build_with(_standin_rocm_builder(monkeypatch))
    return _build_with({"cpu": CpuReferenceBuilder, "triton": TritonBuilder}[request.param])


def test_the_corpus_covers_every_class():
    assert len(corpus.CORRUPTIONS) >= 66
    kinds = {name.rsplit("-", 1)[-1] for name in corpus.CORRUPTIONS}
    assert {"list", "dtype", "device", "shape", "none"} <= kinds


def test_the_base_record_uses_the_last_block_of_the_cache():
    assert int(corpus.make_record().block_table_tensor.max()) == corpus.NUM_BLOCKS - 1


@pytest.mark.parametrize("case", sorted(corpus.CORRUPTIONS))
def test_malformed_record_is_rejected_naming_its_field(case, check):
    want, corrupt = corpus.CORRUPTIONS[case]
    with pytest.raises(MetadataError) as exc:
        check(corrupt(corpus.make_record()))
    assert corpus.names_field(exc.value, want), f"expected {want!r} named: {exc.value}"
    assert str(exc.value).startswith(f"{exc.value.field}: expected "), str(exc.value)
    assert ", found " in str(exc.value)


@pytest.mark.parametrize("case", sorted(corpus.VALID))
def test_valid_edge_case_is_accepted(case, check):
    check(corpus.VALID[case](corpus.make_record()))
