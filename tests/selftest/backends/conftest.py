"""Stand-ins of vendor libraries for the backend selftests, loaded once per session.

``fake_aiter`` (fake_aiter.py) stands in for AMD AITER; the ROCm selftests reach it as
``sys.modules[FAKE_AITER]`` (registered here, before their modules import).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

FAKE_AITER = "mla_selftest_fake_aiter"


def _register(name: str, filename: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_register(FAKE_AITER, "fake_aiter.py")
