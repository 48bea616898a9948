"""Fixtures of the SGLang engine tests: one measurement of the installed SGLang per run.

The AITER stand-in goes into ``sys.modules`` before any SGLang module imports (SGLang's
aiter backend imports AITER's names once, at import time). Without SGLang installed,
nothing here is collected: ``nox -s sglang`` makes the environment that has it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

collect_ignore_glob = [] if importlib.util.find_spec("sglang") else ["test_*.py"]

FACTS_ENV = "MLA_ENGINE_FACTS"

if not collect_ignore_glob:
    from conformance.engines.sglang.aiter_standin import standin

    standin()


@pytest.fixture(scope="session")
def run():
    from conformance.engines.sglang.measure import Measurement

    return Measurement()


@pytest.fixture(scope="session")
def facts():
    """The measured facts; written to ``$MLA_ENGINE_FACTS`` when set."""
    import sglang

    from conformance.engines.facts import write_facts
    from conformance.engines.sglang.measure import measure

    measured = measure(version=sglang.__version__)
    target = os.environ.get(FACTS_ENV)
    if target:
        write_facts(Path(target), measured)
    return measured
