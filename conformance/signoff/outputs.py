"""The files a sign-off writes beside the JUnit directory, and taking them down.

``<reports>/conformance.xml`` and ``signoff.{md,json,html}`` describe the reports of
``<reports>/junit/`` at the time they were made. A failed sign-off removes them
(`remove_outputs`); a new run that changes those reports moves them aside with the reports
it supersedes (`move_outputs`, from `conformance.harness.archive`), so no verdict is left
standing over reports it did not see.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

OUTPUT_NAMES: dict[str, str] = {
    "junit": "conformance.xml",
    "markdown": "signoff.md",
    "json": "signoff.json",
    "html": "signoff.html",
}


def output_paths(reports_dir: Path) -> dict[str, Path]:
    """Where the sign-off writes each of its outputs."""
    return {name: reports_dir / file_name for name, file_name in OUTPUT_NAMES.items()}


def existing_outputs(reports_dir: Path) -> list[Path]:
    """The sign-off outputs present in ``reports_dir``."""
    return [path for path in output_paths(reports_dir).values() if path.is_file()]


def remove_outputs(reports_dir: Path) -> list[Path]:
    """Delete every sign-off output in ``reports_dir`` (after a failed sign-off); the removed."""
    removed = []
    for path in output_paths(reports_dir).values():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def move_outputs(reports_dir: Path, target: Path) -> list[Path]:
    """Move the sign-off outputs of ``reports_dir`` into ``target``; where they went."""
    moved = []
    for path in existing_outputs(reports_dir):
        target.mkdir(parents=True, exist_ok=True)
        moved.append(Path(shutil.move(str(path), target / path.name)))
    return moved
