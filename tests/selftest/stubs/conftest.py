"""Fixtures of the stub family's selftests."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest


@pytest.fixture
def traced_allocations() -> Iterator[None]:
    """Trace allocations, so stubs no factory made still say where they were built."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    yield
    if started:
        tracemalloc.stop()
