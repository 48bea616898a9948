"""``python -m conformance signoff`` where defusedxml is missing: ``--help`` still works, and the
command itself says in one line what to install (exit 2), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[3]


def _without_defusedxml(*argv: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys; sys.modules['defusedxml'] = None; "
        f"from conformance.cli.main import main; sys.exit(main({list(argv)!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_help_works_without_defusedxml() -> None:
    result = _without_defusedxml("signoff", "--help")
    assert result.returncode == 0, result.stderr
    assert "--require LIST" in result.stdout


def test_the_signoff_names_the_missing_package_in_one_line(tmp_path: Path) -> None:
    result = _without_defusedxml("signoff", "--reports", str(tmp_path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "needs the Python package 'defusedxml'" in line
