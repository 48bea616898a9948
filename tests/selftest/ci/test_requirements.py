"""Every session's requirement set resolves against plain PyPI, the user's pip setup ignored.

A network test (marker ``network``): it needs https://pypi.org, which CI has. Offline it is
skipped, unless ``CI`` is set, where it fails. pip resolves with ``--dry-run`` from PyPI's
metadata files (PEP 658), so no wheel is downloaded; the three resolutions run in parallel.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
REQUIREMENTS = REPO_ROOT / "requirements"
PYPI = "https://pypi.org/simple"
# Resolving a set proves each set it includes resolves: tests.txt includes cpu.txt, which
# includes base.txt (all of gpu.txt) and torch.txt (checked below).
RESOLVED = ("tests.txt", "lint.txt", "tools.txt")
KEPT_PIP_VARIABLES = {"PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_CLIENT_CERT"}

pytestmark = pytest.mark.network


def _includes(name: str) -> set[str]:
    """`name` and every requirement file it includes (``-r other.txt``), recursively."""
    found = {name}
    for line in (REQUIREMENTS / name).read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*-r\s+(\S+)", line)
        if match:
            found |= _includes(match.group(1))
    return found


def _own_requirements(name: str) -> list[str]:
    """The requirement lines of `name` itself (no comments, no ``-r`` includes)."""
    lines = (
        line.split("#", 1)[0].strip() for line in (REQUIREMENTS / name).read_text().splitlines()
    )
    return [line for line in lines if line and not line.startswith("-r")]


def _needs_pypi() -> None:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must reach https://pypi.org to resolve the requirement sets: {error}")
        pytest.skip(f"no network to pypi.org: {error}")


def plain_pypi_environment() -> dict[str, str]:
    """This environment without pip's configuration: no config file, no PIP_* sources."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIP_", "UV_")) or key in KEPT_PIP_VARIABLES
    }
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def resolve(requirements: list[str], report: Path) -> subprocess.CompletedProcess[str]:
    """``pip install --dry-run`` of `requirements` (pip arguments) against plain PyPI."""
    command = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
        "--index-url", PYPI, "--report", str(report), *requirements,
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, env=plain_pypi_environment(), timeout=600
    )


def conflict(result: subprocess.CompletedProcess[str]) -> str:
    """pip's explanation of a failed resolution, the conflicting requirements named."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return "\n".join(lines[-15:])


def test_every_session_set_is_covered() -> None:
    covered = set().union(*(_includes(name) for name in RESOLVED))
    files = {path.name for path in REQUIREMENTS.glob("*.txt")}
    # a file of includes only (gpu.txt) resolves when what it includes does
    covered |= {n for n in files if not _own_requirements(n) and _includes(n) - {n} <= covered}
    assert covered == files, f"requirement files no resolution covers: {files - covered}"
    noxfile = (REPO_ROOT / "noxfile.py").read_text(encoding="utf-8")
    used = set(re.findall(r'"(cpu|gpu|tests|lint)"', noxfile))
    assert used == {"cpu", "gpu", "tests", "lint"}


def test_every_requirement_set_resolves_on_plain_pypi(tmp_path: Path) -> None:
    _needs_pypi()

    def one(name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        return name, resolve(["-r", str(REQUIREMENTS / name)], tmp_path / f"{name}.json")

    with ThreadPoolExecutor(len(RESOLVED)) as pool:
        results = dict(pool.map(one, RESOLVED))
    failed = {name: conflict(result) for name, result in results.items() if result.returncode}
    explained = (f"requirements/{name} does not resolve:\n{text}" for name, text in failed.items())
    assert not failed, "\n\n".join(explained)
    report = json.loads((tmp_path / "tests.txt.json").read_text())
    versions = {item["metadata"]["name"].lower(): item for item in report["install"]}
    torch, triton = versions["torch"], versions["triton"]
    pinned = [r for r in torch["metadata"].get("requires_dist", []) if r.startswith("triton")]
    assert all(triton["metadata"]["version"] in r for r in pinned if "==" in r), pinned


def test_a_conflict_fails_and_is_named(tmp_path: Path) -> None:
    """Negative control: two requirements that cannot hold together are reported by name."""
    _needs_pypi()
    result = resolve(["pytest==9.0.0", "pluggy<1.0"], tmp_path / "conflict.json")
    assert result.returncode != 0
    assert "pluggy" in conflict(result) and "pytest" in conflict(result)
