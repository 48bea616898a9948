"""Engine tests run on an engine's own code, inside that engine's session (``nox -s vllm``).

Without the engine installed, nothing here is collected: the engine session says why. The
deprecation warnings the engine's own stack raises as it imports are filtered
(`EngineTarget.quiet_warnings`), so the summary shows those of the code under test.
"""

from __future__ import annotations

import importlib.util

import pytest

from conformance.engines.target import add_warning_filters, engine_target

collect_ignore_glob = [] if importlib.util.find_spec("vllm") else ["vllm/*", "vllm_gpu/*"]


def pytest_configure(config: pytest.Config) -> None:
    add_warning_filters(config, engine_target("vllm"))
