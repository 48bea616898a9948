"""Installing the example dense plug-in into a private ``--target`` folder, for selftests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "dense_mla_plugin"
PIP = (
    *(sys.executable, "-m", "pip", "install", "-q"),
    *("--no-deps", "--no-index", "--no-build-isolation"),
)


def pip_target(target: Path) -> Callable[..., None]:
    """An installer (for `install_plugins`) that pip-installs into `target`."""

    def install(*requirements: str) -> None:
        subprocess.run([*PIP, "--target", str(target), *requirements], check=True, cwd=REPO)

    return install
