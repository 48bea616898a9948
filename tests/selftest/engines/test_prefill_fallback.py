"""A vLLM release without a CPU prefill backend (0.28.0) gets a subclass of its own
``MLAPrefillBackend``: the base class's ``clone``/``prepare_metadata``, no kernels."""

from __future__ import annotations

import abc
import sys
import types

import pytest

from conformance.engines.vllm.adapter import prefill_backend_class

BASE = "vllm.v1.attention.backends.mla.prefill.base"


class FakePrefillBackend(abc.ABC):
    """What vLLM 0.28.0's ``MLAPrefillBackend`` offers a builder."""

    @staticmethod
    @abc.abstractmethod
    def get_name() -> str: ...

    def __init__(self, num_heads: int) -> None:
        self.num_heads = num_heads

    def clone(self) -> FakePrefillBackend:
        return self.__class__(num_heads=self.num_heads)

    def prepare_metadata(self, metadata: object) -> None:
        self.metadata = metadata

    @abc.abstractmethod
    def run_prefill_new_tokens(self, q: object) -> object: ...


@pytest.fixture
def release_without_cpu_prefill(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = BASE.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so that `...prefill.cpu_sdpa` is looked up and missing
        monkeypatch.setitem(sys.modules, name, module)
    sys.modules[BASE].MLAPrefillBackend = FakePrefillBackend


def test_the_builder_only_backend_is_the_release_s_own_class(release_without_cpu_prefill) -> None:
    cls = prefill_backend_class()
    assert issubclass(cls, FakePrefillBackend) and cls is not FakePrefillBackend
    backend = cls(num_heads=16)
    clone = backend.clone()
    assert isinstance(clone, cls) and clone.num_heads == 16
    clone.prepare_metadata("meta")
    assert clone.metadata == "meta"
    with pytest.raises(NotImplementedError, match="no CPU prefill backend"):
        backend.run_prefill_new_tokens("q")
