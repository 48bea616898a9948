"""Fixtures of vLLM's GPU decode tests: one `VllmDecodeBackend` per implementation and run.

Each implementation's status (ran, or why not), the GPUs seen and what vLLM imported as a
stand-in (`conformance.engines.vllm.extensions`: a bundle without vLLM's wheel) are written
to ``$MLA_ENGINE_FACTS`` when set: the run's sidecar names them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conformance.engines.vllm.adapter import register_architecture_standin
from conformance.engines.vllm.decode import IMPLEMENTATIONS, VllmDecodeBackend
from conformance.engines.vllm.extensions import stood_in
from conformance.runs.provenance import gpu_names

FACTS_ENV = "MLA_ENGINE_FACTS"


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-gpu")


@pytest.fixture(scope="session")
def implementations(workdir: Path) -> Iterator[dict[str, VllmDecodeBackend]]:
    """Every implementation of `IMPLEMENTATIONS`; its status is written at the end. Where
    vLLM's kernels are stood in, its model class is too (`register_architecture_standin`)."""
    if stood_in():
        register_architecture_standin()
    backends = {name: VllmDecodeBackend(name, workdir) for name in IMPLEMENTATIONS}
    yield backends
    target = os.environ.get(FACTS_ENV)
    if target:
        import vllm

        statuses = {}
        for name, backend in backends.items():
            available = backend.availability()
            statuses[name] = {"status": "ran" if available.available else available.reason}
        document = {"engine": "vllm", "version": vllm.__version__, "builders": statuses}
        document["stood_in"] = stood_in()
        document["gpus"] = gpu_names()
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


@pytest.fixture
def record_errors(request: pytest.FixtureRequest) -> Callable[[str, object], None]:
    """Record a JUnit property of this test."""
    return lambda name, value: request.node.user_properties.append((name, value))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The installed release's known findings run as strict xfails (they must still fail)."""
    import importlib.metadata

    from conformance.engines.target import engine_target, mark_known_findings

    target = engine_target("vllm_gpu")
    version = importlib.metadata.version(target.distribution)
    mark_known_findings(items, target.known_findings(version))
