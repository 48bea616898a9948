"""The example out-of-tree plug-in (examples/dense_mla_plugin): installed, found, certified.

The example is installed into a fresh target directory through the plug-in hook of the
nox sessions (`conformance.harness.plugins_env`), found by its entry point, run through
the whole conformance set and signed off. Three broken variants of it (kv scale dropped,
LSE scaled, causal mask shifted by one) must fail the numerics contract, naming the case
and the error figures.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from backends import registry
from backends.base import DecodeScales
from conformance.goldens import GoldenCase, GoldenStore
from conformance.harness.plugins_env import PLUGINS_ENV, install_plugins

from plugin_install import EXAMPLE, REPO, pip_target

pytestmark = pytest.mark.selftest

NUMERICS = REPO / "tests" / "conformance" / "test_numerics.py"
NAME = "dense_torch"
PYTEST = (sys.executable, "-m", "pytest", "tests/conformance", "-q", "-p", "no:cacheprovider")
SIGNOFF = (sys.executable, "-m", "conformance", "signoff")


def _cases() -> list[GoldenCase]:
    entries = GoldenStore().read_manifest().entries.values()
    return [GoldenCase.from_json(entry.case) for entry in entries]


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
    assert decoded == {case.id for case in _cases()}, "every golden decode case must run"
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


def _run_broken(pytester, monkeypatch, broken) -> pytest.RunResult:
    real = registry.get_backend
    monkeypatch.setattr(registry, "get_backend", lambda n: broken if n == broken.name else real(n))
    return pytester.runpytest_inprocess(
        str(NUMERICS),
        f"--backend={broken.name}",
        "-p",
        "no:cacheprovider",
        "-rf",
        "-k",
        "decode_matches",
    )


def _failed(result: pytest.RunResult) -> set[str]:
    pattern = re.compile(r"^FAILED .*::test_decode_matches_golden\[([^\]]+)\]")
    return {m.group(1) for line in result.outlines if (m := pattern.match(line))}


def test_the_example_without_its_kv_scale_fails(pytester, monkeypatch, example) -> None:
    class DropsKvScale(example.DenseTorchBackend):
        name: ClassVar[str] = "dense-drops-kv-scale"

        def decode_scaled(self, q, kv_cache, decode, scales):
            unscaled = DecodeScales(scales.sm_scale, scales.q_scale, 1.0)
            return super().decode_scaled(q, kv_cache, decode, unscaled)

    result = _run_broken(pytester, monkeypatch, DropsKvScale())
    fp8_kv = {c.id for c in _cases() if c.kv_dtype == "fp8"}
    assert _failed(result) == fp8_kv
    case = sorted(fp8_kv)[0]
    result.stdout.fnmatch_lines([f"*{case} decode (*) out: MISMATCH*", "*max abs err *"])


def test_the_example_with_its_own_softmax_scale_fails(pytester, monkeypatch, example) -> None:
    class OwnScale(example.DenseTorchBackend):
        name: ClassVar[str] = "dense-own-scale"

        def decode_scaled(self, q, kv_cache, decode, scales):
            own = DecodeScales(1.0 / math.sqrt(q.shape[-1]), scales.q_scale, scales.kv_scale)
            return super().decode_scaled(q, kv_cache, decode, own)

    result = _run_broken(pytester, monkeypatch, OwnScale())
    other_scale = {c.id for c in _cases() if c.sm_scale != 1.0 / math.sqrt(576)}
    assert other_scale and _failed(result) == other_scale
    case = sorted(other_scale)[0]
    result.stdout.fnmatch_lines([f"*{case} decode (*) out: MISMATCH*", "*max abs err *"])


def test_the_example_with_a_scaled_lse_fails(pytester, monkeypatch, example) -> None:
    class ScalesLse(example.DenseTorchBackend):
        name: ClassVar[str] = "dense-scales-lse"

        def decode_scaled(self, q, kv_cache, decode, scales):
            out, lse = super().decode_scaled(q, kv_cache, decode, scales)
            return out, lse * 2.0

    result = _run_broken(pytester, monkeypatch, ScalesLse())
    assert _failed(result) == {c.id for c in _cases()}
    result.stdout.fnmatch_lines(["*decode (*) lse: MISMATCH*", "*max abs err *"])


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
    result = _run_broken(pytester, monkeypatch, ShiftsMask())
    multi_token = {c.id for c in _cases() if c.q_len > 1 and c.causal}
    assert multi_token and _failed(result) == multi_token
    case = sorted(multi_token)[0]
    result.stdout.fnmatch_lines([f"*{case} decode (*) *: MISMATCH*", "*max abs err *"])
