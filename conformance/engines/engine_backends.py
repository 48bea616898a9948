"""How an engine driver names one of its engine's MLA backends (torch-free).

Each driver (`conformance.engines.vllm.adapter`, `conformance.engines.sglang.adapter`) keeps
a table of `EngineBackend` by the engine's own name of the backend: the module and class
that the engine defines it in, and how the suite runs it on a CPU.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineBackend:
    """One MLA backend of an engine: where its class lives, and how it runs here."""

    module: str
    """Its module, under the engine's package of attention backends."""
    cls: str
    cache_dtype: str = "auto"
    page_size: int = 1
    """The KV cache's page size (vLLM calls it the block size)."""
    standin: bool = False
    """Whether it runs over the suite's AITER stand-in."""

    def backend_class(self, package: str) -> type:
        """The backend class, imported from the engine's `package` of attention backends."""
        return getattr(importlib.import_module(f"{package}.{self.module}"), self.cls)
