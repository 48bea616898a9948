"""Fixtures of the vLLM engine tests: one measurement of the installed vLLM per run."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from conformance.engines.facts import EngineFacts, write_facts
from conformance.engines.target import VLLM, mark_known_findings
from conformance.engines.vllm.measure import Measurement, measure

FACTS_ENV = "MLA_ENGINE_FACTS"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The installed release's known findings run as strict xfails (they must still fail)."""
    import importlib.metadata

    version = importlib.metadata.version(VLLM.distribution)
    stale = mark_known_findings(items, VLLM.known_findings(version))
    if stale and len(items) > 1:
        warnings.warn(f"vllm {version}: known findings of no collected test: {stale}", stacklevel=1)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-engine")


@pytest.fixture(scope="session")
def measurement(workdir: Path) -> Measurement:
    return Measurement(workdir / "checks")


@pytest.fixture(scope="session")
def facts(workdir: Path) -> EngineFacts:
    """The measured facts; written to ``$MLA_ENGINE_FACTS`` when set."""
    import vllm

    measured = measure(workdir / "facts", version=vllm.__version__)
    target = os.environ.get(FACTS_ENV)
    if target:
        write_facts(Path(target), measured)
    return measured
