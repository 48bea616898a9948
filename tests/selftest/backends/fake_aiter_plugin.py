"""A pytest plugin (``-p fake_aiter_plugin``) that runs the ``rocm`` backend over the AITER
stand-in in a pytest process of its own, xdist workers included: for the selftests that run
the shared conformance set end to end (test_rocm_conformance_on_fake.py). A helper, not a
test module. Set by the environment:

- ``MLA_FAKE_AITER_ARCH`` / ``MLA_FAKE_AITER_CUS``: the fake device (default gfx942, 80);
- ``MLA_FAKE_AITER_UNSCALED_V=1``: the ROCm/aiter#6732 defect (V not scaled by kv_scale);
- ``MLA_FAKE_AITER_ABORT=1``: a backend that asks for an LSE everywhere and does not refuse,
  over a stand-in that really aborts the process where AITER's kernel lookup fails.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

import pytest

PATCHES = pytest.StashKey[pytest.MonkeyPatch]()


def pytest_configure(config: pytest.Config) -> None:
    path = Path(__file__).with_name("fake_aiter.py")
    spec = importlib.util.spec_from_file_location("mla_selftest_fake_aiter", path)
    assert spec is not None and spec.loader is not None
    fake = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fake
    spec.loader.exec_module(fake)
    patch = config.stash[PATCHES] = pytest.MonkeyPatch()
    aborts = os.environ.get("MLA_FAKE_AITER_ABORT") == "1"
    fake.install_standin_backend(
        patch,
        arch=os.environ.get("MLA_FAKE_AITER_ARCH", "gfx942"),
        num_cus=int(os.environ.get("MLA_FAKE_AITER_CUS", "80")),
        unscaled_v=os.environ.get("MLA_FAKE_AITER_UNSCALED_V") == "1",
        really_abort=aborts,
    )
    if aborts:
        from backends.rocm import backend, decode

        patch.setattr(decode, "refuse_abort", lambda *args, **kwargs: None)
        lse_everywhere = functools.partial(decode.aiter_decode, return_lse=True)
        patch.setattr(backend, "aiter_decode", lse_everywhere)


def pytest_unconfigure(config: pytest.Config) -> None:
    config.stash[PATCHES].undo()
