"""The GPU machine runs the scripts under scripts/ by their path: each one with a ``#!`` line
must be executable in git (a sourced step, with none, need not be)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def git_modes(folder: str) -> dict[str, str]:
    """``{path: mode}`` of the files git tracks under `folder`."""
    listing = subprocess.run(
        ["git", "ls-files", "-s", folder], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {line.split("\t")[1]: line.split()[0] for line in listing.splitlines()}


def not_executable(modes: dict[str, str]) -> list[str]:
    """The scripts among `modes` that start with ``#!`` but are not executable."""
    return sorted(
        path
        for path, mode in modes.items()
        if mode != "100755" and (ROOT / path).read_bytes().startswith(b"#!")
    )


def test_every_script_with_a_shebang_is_executable() -> None:
    modes = git_modes("scripts")
    assert any(path.endswith(".sh") for path in modes)
    assert not_executable(modes) == []


def test_a_script_that_lost_its_mode_is_named() -> None:
    modes = git_modes("scripts")
    assert not_executable({**modes, "scripts/gpu_flashmla.sh": "100644"}) == [
        "scripts/gpu_flashmla.sh"
    ]
