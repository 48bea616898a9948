"""A backend that cannot run here: pytest's summary says so once, not once per test location.

Every conformance test is skipped with the same reason; ``-ra`` used to print one SKIPPED line
per test function (34 for a whole session). The JUnit file keeps each test's own location.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
MODULES = ("tests/conformance/test_stubs.py", "tests/conformance/test_metadata_holes.py")


def _unavailable_backend() -> str:
    from backends.registry import get_backend

    for name in ("rocm", "cuda", "flashinfer"):
        if not get_backend(name).availability().available:
            return name
    pytest.skip("not applicable: every GPU backend can run on this machine")


def test_the_skips_of_an_unavailable_backend_are_one_summary_line(tmp_path: Path) -> None:
    backend = _unavailable_backend()
    junit = tmp_path / f"{backend}.xml"
    command = [sys.executable, "-m", "pytest", *MODULES, f"--backend={backend}", "-ra"]
    command += ["-p", "no:cacheprovider", f"--junitxml={junit}"]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(lines) == 1, "\n".join(lines)
    assert lines[0].startswith("SKIPPED [") and f"backend {backend} unavailable: " in lines[0]
    assert " tests/conformance: " in lines[0], lines[0]
    text = next(tmp_path.rglob(f"{backend}.xml")).read_text()
    assert "tests/conformance/test_stubs.py:" in text  # each test keeps its own location
