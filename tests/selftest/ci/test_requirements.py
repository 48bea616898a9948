"""Every session's requirement set resolves against plain PyPI, the user's pip setup ignored.

A network test (marker ``network``): it needs https://pypi.org, which CI has. Offline it is
skipped, unless ``CI`` is set, where it fails. uv (or pip ``--dry-run``) resolves from PyPI's
metadata files (PEP 658), so no wheel is downloaded; the resolutions run in
parallel.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
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
    """This environment without pip's or uv's configuration: no config file, no sources."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIP_", "UV_")) or key in KEPT_PIP_VARIABLES
    }
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


@functools.cache
def _uv() -> str | None:
    """The uv binary: the tests session installs the ``uv`` package beside pytest."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError, TypeError):
        return shutil.which("uv")


def resolve(requirements: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """Resolve a requirements file against plain PyPI for this interpreter.

    ``uv pip compile --no-config`` where uv is installed (seconds), else ``pip install
    --dry-run --ignore-installed --report`` (about 30 s for torch).
    """
    uv = _uv()
    if uv is not None:
        command = [
            uv, "pip", "compile", "--no-config", "--quiet", "--index-url", PYPI,
            "--python", sys.executable, "--output-file", str(out), str(requirements),
        ]  # fmt: skip
    else:
        command = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
            "--progress-bar", "off", "--index-url", PYPI, "--report", str(out),
            "-r", str(requirements),
        ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, env=plain_pypi_environment(), timeout=600
    )


def conflict(result: subprocess.CompletedProcess[str]) -> str:
    """The resolver's explanation of a failure, the conflicting requirements named."""
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "conflict is caused by" in line), None)
    return "\n".join(lines[-15:] if start is None else lines[start:][:15])


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
    _uv()  # found once, before the threads

    def one(name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        return name, resolve(REQUIREMENTS / name, tmp_path / f"{name}.out")

    with ThreadPoolExecutor(len(RESOLVED)) as pool:
        results = dict(pool.map(one, RESOLVED))
    failed = {name: conflict(result) for name, result in results.items() if result.returncode}
    explained = (f"requirements/{name} does not resolve:\n{text}" for name, text in failed.items())
    assert not failed, "\n\n".join(explained)


def test_a_conflict_fails_and_is_named(tmp_path: Path) -> None:
    """Negative control: the pins that once broke a plain-PyPI set-up fail, named."""
    _needs_pypi()
    broken = tmp_path / "broken.txt"
    broken.write_text("torch==2.13.0\ntriton==3.9.0\n")
    result = resolve(broken, tmp_path / "broken.out")
    assert result.returncode != 0
    assert "triton" in conflict(result) and "torch" in conflict(result), conflict(result)
