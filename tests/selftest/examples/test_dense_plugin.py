"""The example out-of-tree plug-in (examples/dense_mla_plugin): installed, found, certified.

The example is installed into a fresh target directory through the plug-in hook of the
nox sessions (`conformance.harness.plugins_env`), found by its entry point, run through
the whole conformance set and signed off. Four broken variants of it (kv scale dropped,
its own softmax scale, LSE scaled, causal mask shifted by one) must fail the numerics
contract on exactly the cases they break, naming the case and the error figures.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from backends.base import DecodeScales
from conformance.harness.plugins_env import PLUGINS_ENV, install_plugins

from backend_under_test import failed_cases, golden_cases, run_numerics
from plugin_install import EXAMPLE, REPO, pip_target

pytestmark = pytest.mark.selftest

NAME = "dense_torch"
PYTEST = (sys.executable, "-m", "pytest", "tests/conformance", "-q", "-p", "no:cacheprovider")
SIGNOFF = (sys.executable, "-m", "conformance", "signoff")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed (with its entry point) into a fresh directory."""
    target = tmp_path_factory.mktemp("plugin-env")
    source = tmp_path_factory.mktemp("plugin-src") / EXAMPLE.name  # builds leave files behind
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    done = install_plugins(pip_target(target), {PLUGINS_ENV: str(source)})
    assert done == [str(source)]
    return target


def test_the_example_is_found_by_its_entry_point(installed: Path) -> None:
    code = (
        "from backends.registry import get_backend; print(get_backend('dense_torch').declaration())"
    )
    env = {**os.environ, "PYTHONPATH": str(installed)}
    shown = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "plan_format=None" in shown.stdout


def test_the_example_passes_the_conformance_set_and_signs_off(installed: Path) -> None:
    reports = installed / "reports"
    junit = reports / "junit" / f"{NAME}.xml"
    env = {**os.environ, "PYTHONPATH": str(installed), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [*PYTEST, f"--backend={NAME}", f"--junitxml={junit}"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-4000:]
    text = junit.read_text()
    decoded = set(re.findall(r'name="test_decode_matches_golden\[([^\]]+)\]"', text))
    assert decoded == {case.id for case in golden_cases()}, "every golden decode case must run"
    skipped = re.findall(r'<skipped[^>]*message="([^"]*)"', text)
    assert skipped and all(m.startswith("not applicable: ") for m in skipped), skipped[:3]
    assert not any("test_decode_matches_golden" in m for m in skipped)
    signoff = subprocess.run(
        [*SIGNOFF, "--require", NAME, "--reports", str(reports), "--no-evidence"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    verdict = json.loads((reports / "signoff.json").read_text()) if signoff.returncode < 2 else {}
    assert signoff.returncode == 0, (signoff.stdout[-3000:], verdict)


# --------------------------------------------------------------------------------------
# Broken variants of the example must fail the numerics contract


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch):
    """The example's module, importable in-process."""
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    from dense_mla import backend

    return backend


Rescale = Callable[[torch.Tensor, DecodeScales], DecodeScales]


def _rescaled(example, label: str, rescale: Rescale):
    """The example's backend, named `label`, decoding with ``rescale(q, scales)`` for the
    scales it is given."""

    class Rescaled(example.DenseTorchBackend):
        name: ClassVar[str] = label

        def decode_scaled(self, q, kv_cache, decode, scales):
            return super().decode_scaled(q, kv_cache, decode, rescale(q, scales))

    return Rescaled()


def _assert_fails_exactly(result: pytest.RunResult, cases: set[str], part: str) -> None:
    """The numerics run failed on exactly `cases`, the first of them naming a mismatch of
    its `part` (``out``, ``lse`` or ``*``) with the error figures."""
    __tracebackhide__ = True
    assert cases and failed_cases(result) == cases
    case = sorted(cases)[0]
    result.stdout.fnmatch_lines([f"*{case} decode (*) {part}: MISMATCH*", "*max abs err *"])


def test_the_example_without_its_kv_scale_fails(pytester, monkeypatch, example) -> None:
    def unscaled(q: torch.Tensor, scales: DecodeScales) -> DecodeScales:
        return DecodeScales(scales.sm_scale, scales.q_scale, 1.0)

    broken = _rescaled(example, "dense-drops-kv-scale", unscaled)
    result = run_numerics(pytester, monkeypatch, broken)
    _assert_fails_exactly(result, {c.id for c in golden_cases() if c.kv_dtype == "fp8"}, "out")


def test_the_example_with_its_own_softmax_scale_fails(pytester, monkeypatch, example) -> None:
    def own(q: torch.Tensor, scales: DecodeScales) -> DecodeScales:
        return DecodeScales(1.0 / math.sqrt(q.shape[-1]), scales.q_scale, scales.kv_scale)

    result = run_numerics(pytester, monkeypatch, _rescaled(example, "dense-own-scale", own))
    other_scale = {c.id for c in golden_cases() if c.sm_scale != 1.0 / math.sqrt(576)}
    _assert_fails_exactly(result, other_scale, "out")


def test_the_example_with_a_scaled_lse_fails(pytester, monkeypatch, example) -> None:
    class ScalesLse(example.DenseTorchBackend):
        name: ClassVar[str] = "dense-scales-lse"

        def decode_scaled(self, q, kv_cache, decode, scales):
            out, lse = super().decode_scaled(q, kv_cache, decode, scales)
            return out, lse * 2.0

    result = run_numerics(pytester, monkeypatch, ScalesLse())
    _assert_fails_exactly(result, {c.id for c in golden_cases()}, "lse")


def test_the_example_with_its_causal_mask_shifted_fails(pytester, monkeypatch, example) -> None:
    def shifted(q, kv, *, causal, scales):
        n, length = q.shape[0], kv.shape[0]
        scores = torch.einsum("nhd,ld->nhl", q.float(), kv.float())
        scores = scores * (scales.sm_scale * scales.q_scale * scales.kv_scale)
        if causal:
            visible = length - n + 2 + torch.arange(n)  # BROKEN: one token too many
            hidden = torch.arange(length)[None, :] >= visible[:, None]
            scores = scores.masked_fill(hidden[:, None, :], float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
        out = torch.einsum("nhl,ld->nhd", weights, kv[:, :512].float()) * scales.kv_scale
        return out, lse

    class ShiftsMask(example.DenseTorchBackend):
        name: ClassVar[str] = "dense-shifts-mask"

    monkeypatch.setattr(example, "attend", shifted)
    result = run_numerics(pytester, monkeypatch, ShiftsMask())
    _assert_fails_exactly(result, {c.id for c in golden_cases() if c.q_len > 1 and c.causal}, "*")
