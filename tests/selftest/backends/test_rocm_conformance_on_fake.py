"""The shared conformance set through the ``rocm`` backend over the AITER stand-in, whose
kernels are AITER's own tables (gfx942 and gfx950): every case passes or is not applicable
with AITER's reason, derived by the suite, and nothing aborts. Negative controls: the
ROCm/aiter#6732 defect (V not scaled by ``kv_scale``) fails the numerics contract, and a
worker that really aborts inside AITER is that test's error, with the reason, in a JUnit
file that is still written. Each run is a pytest process of its own (fake_aiter_plugin.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from defusedxml import ElementTree

from conformance.applicability import LSE_NOT_APPLICABLE, NOT_APPLICABLE
from conformance.goldens import CASES

pytestmark = pytest.mark.usefixtures("standin_never_into_reports")
REPO = Path(__file__).resolve().parents[3]
NUMERICS = "tests/conformance/test_numerics.py"
GOLDEN = f"{NUMERICS}::test_decode_matches_golden"


def _run(tmp_path: Path, *args: str, **fake: str) -> tuple[subprocess.CompletedProcess, dict]:
    """pytest over the stand-in; its output and the JUnit test cases by name."""
    junit = tmp_path / "junit" / "rocm.xml"
    env = {**os.environ, **{f"MLA_FAKE_AITER_{k.upper()}": v for k, v in fake.items()}}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), str(REPO)])
    for inherited in ("MLA_NATIVE_CALL_NOTES", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID"):
        env.pop(inherited, None)  # this process may itself be an xdist worker
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--backend=rocm", "-p", "fake_aiter_plugin",
         "-p", "no:cacheprovider", f"--junitxml={junit}", "-q", "-rfs"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    written = junit if junit.exists() else junit.parent / "partial" / junit.name
    cases = ElementTree.parse(written).getroot().iter("testcase")
    return done, {case.get("name"): case for case in cases}


def _properties(case) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in case.iter("property")}


@pytest.mark.parametrize(
    ("arch", "num_cus", "passed", "not_applicable", "lse_uncompared"),
    [("gfx942", "80", 270, 28, 46), ("gfx950", "256", 280, 23, 17)],
)
def test_every_case_passes_or_is_not_applicable_with_aiter_s_reason(
    tmp_path, arch, num_cus, passed, not_applicable, lse_uncompared
) -> None:
    done, cases = _run(tmp_path, "tests/conformance", arch=arch, cus=num_cus)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{passed} passed, {not_applicable} skipped" in done.stdout, done.stdout[-2000:]
    skipped = [case for case in cases.values() if case.find("skipped") is not None]
    assert len(skipped) == not_applicable
    for case in skipped:
        message = case.find("skipped").get("message")
        assert message.startswith(f"{NOT_APPLICABLE}no {arch} kernel: "), message
        assert _properties(case).get("not_applicable") == "suite", case.get("name")
    uncompared = [case for case in cases.values() if LSE_NOT_APPLICABLE in _properties(case)]
    assert len(uncompared) == lse_uncompared
    assert all(len(case) == 1 for case in uncompared), "passed, with their properties only"


def test_negative_control_aiter_6732_v_not_scaled_fails_the_numerics_contract(tmp_path) -> None:
    done, cases = _run(tmp_path, NUMERICS, "-k", "decode_matches", unscaled_v="1")
    failed = {name for name, case in cases.items() if case.find("failure") is not None}
    fp8_cache = {  # the gfx942 cases with an fp8 cache (kv_scale != 1): V is off by kv_scale
        case.id for case in CASES if case.arch == "gfx942" and case.kv_dtype == "fp8"
    }
    assert len(fp8_cache) >= 8
    assert failed == {f"test_decode_matches_golden[{case}]" for case in fp8_cache}, done.stdout
    failure = cases["test_decode_matches_golden[gfx942-h16-fp8-q1-p1-cu304-b64]"].find("failure")
    assert "gfx942-h16-fp8-q1-p1-cu304-b64 decode (golden plan fed) out: MISMATCH" in failure.text
    assert "lse: MISMATCH" not in failure.text, "the LSE does not depend on V"


def test_a_worker_that_aborts_is_that_test_s_error_and_the_junit_is_written(tmp_path) -> None:
    aborts = f"{GOLDEN}[gfx942-h16-fp8-q1-p1-cu304-b64]"
    done, cases = _run(
        tmp_path, aborts, f"{NUMERICS}::test_goldens_are_intact", "-n", "1", abort="1"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout, done.stdout
    assert cases["test_goldens_are_intact"].find("error") is None
    error = cases["test_decode_matches_golden[gfx942-h16-fp8-q1-p1-cu304-b64]"].find("error")
    assert error is not None, "the crashed test is reported as an error"
    assert "crashed while running" in error.text
    assert "died inside aiter.mla.mla_decode_fwd (q_type:fp8 kv_type:fp8 gqa:16" in error.text
    assert "return_lse=True" in error.text
