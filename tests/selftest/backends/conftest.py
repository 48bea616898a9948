"""Stand-ins of vendor libraries for the backend selftests, loaded once per session.

``fake_aiter`` (fake_aiter.py) stands in for AMD AITER; the ROCm selftests reach it as
``sys.modules[FAKE_AITER]`` (registered here, before their modules import). The fixtures
`rocm` (a backend over an installed stand-in) and `standin_never_into_reports` serve the
ROCm wiring tests, whose helpers (rocm_wiring.py) are registered as
``mla_selftest_rocm_wiring``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

FAKE_AITER = "mla_selftest_fake_aiter"
REPO = Path(__file__).resolve().parents[3]


def _register(name: str, filename: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_register(FAKE_AITER, "fake_aiter.py")
_register("mla_selftest_rocm_wiring", "rocm_wiring.py")


@pytest.fixture
def standin_never_into_reports(request: pytest.FixtureRequest) -> None:
    """Skip a stand-in test whose JUnit would go into reports/: it is never a rocm run."""
    xml = request.config.getoption("xmlpath", None)
    if xml and Path(xml).resolve().is_relative_to(REPO / "reports"):
        pytest.skip("stand-in results never go into reports/: they are not a rocm run")


@pytest.fixture
def rocm(monkeypatch: pytest.MonkeyPatch):  # -> make(arch, num_cus, **standin)
    """``(arch, num_cus) -> (backend, standin)`` over an installed stand-in."""

    def make(arch: str = "gfx942", num_cus: int = 8, **standin: Any):
        return sys.modules[FAKE_AITER].install_standin_backend(
            monkeypatch, arch=arch, num_cus=num_cus, **standin
        )

    return make
