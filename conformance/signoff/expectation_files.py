"""Which expectation file each run used, and whether the sign-off may trust it (SIGN022).

A run's sidecar records the expectation file it applied (``expectations_file``) and the
sha256 of its bytes (``expectations_sha256``, null when there was no such file). The expected
skips and xfails of a run are only as good as that file:

- A **built-in** target (`conformance.targets.BUILTIN_TARGETS`) must have run with the
  repository's committed file, ``conformance/expectations/<name>.txt``: as git's ``HEAD``
  holds it, or as the checkout holds it where git cannot tell (no git metadata, an untracked
  file, a copy named by ``MLA_CONFORMANCE_GIT_COMMIT``). A run whose recorded sha256 is not
  that file's (another ``--expectations-dir``, an edited or uncommitted copy, no file where
  the repository has one) is refused: SIGN022, the backend is INCOMPLETE.
- A sidecar made before runs recorded the sha256 is taken at its recorded path: the
  repository's path (or no path at all) is accepted with a warning that the file's content
  cannot be checked; any other path is refused (SIGN022). Committed evidence of that age is
  pinned anyway: its fingerprint holds the hash of the repository's file.
- An **engine** run (``kind: engine``: ``nox -s vllm``) applies no expectation file; the
  sign-off applies the repository's to its skips, so nothing is recorded to check.
- A **plug-in** brings its own file: nothing is refused for it, and every page lists each of
  its expected skips and xfails with the reason (`conformance.signoff.report_expected`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.runs.environment import GIT_COMMIT_VARIABLE
from conformance.runs.expectations import expectations_sha256
from conformance.signoff.checks import UNCOMMITTED_EXPECTATIONS
from conformance.signoff.issue import Issue
from conformance.signoff.model import RunReport
from conformance.target_types import ENGINE

FILE_KEY, SHA_KEY = "expectations_file", "expectations_sha256"


def repository_path(backend: str) -> str:
    """``conformance/expectations/<backend>.txt``: where a built-in's file is committed."""
    return f"conformance/expectations/{backend}.txt"


def committed_sha256(path: Path) -> str | None:
    """The sha256 of ``path`` as git's ``HEAD`` holds it; None where git cannot tell."""
    if os.environ.get(GIT_COMMIT_VARIABLE):  # a copied tree: its git metadata may be older
        return None
    try:
        shown = subprocess.run(
            ["git", "-C", str(path.parent), "show", f"HEAD:./{path.name}"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return hashlib.sha256(shown.stdout).hexdigest() if shown.returncode == 0 else None


def reference_sha256(repository_file: Path) -> tuple[str | None, str]:
    """The sha256 a built-in's runs must record, and a note when the checkout's copy is not
    the committed one (empty otherwise)."""
    working = expectations_sha256(repository_file)
    committed = committed_sha256(repository_file)
    if committed is None or committed == working:
        return working, ""
    return committed, (
        f"; the checkout's copy has uncommitted changes (sha256 {_short(working)}): commit or "
        "restore it"
    )


def used_files(runs: Sequence[RunReport], repository_file: Path | None) -> list[dict[str, Any]]:
    """One row per distinct file the runs used: ``file``, ``sha256`` (None: not recorded, or
    no file), ``recorded`` (whether the sidecar records the sha256), ``runs`` (JUnit names),
    ``builtin`` (checked against the repository's file), ``engine`` (an engine run, which
    applies none) and ``repository`` (whether it is that file; None for a plug-in, or when
    no sha256 is recorded)."""
    reference = None if repository_file is None else reference_sha256(repository_file)[0]
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in runs:
        sidecar = run.sidecar or {}
        recorded = SHA_KEY in sidecar
        file, sha = (
            None if v is None else str(v) for v in (sidecar.get(FILE_KEY), sidecar.get(SHA_KEY))
        )
        engine = sidecar.get("kind") == ENGINE and not recorded
        row = rows.setdefault(
            (file, sha, recorded, engine),
            {
                "engine": engine,
                "file": file,
                "sha256": sha,
                "recorded": recorded,
                "runs": [],
                "builtin": repository_file is not None,
                "repository": None
                if repository_file is None
                else (sha == reference if recorded else None),
            },
        )
        row["runs"].append(run.path.name)
    return list(rows.values())


def expectation_issues(
    backend: str, rows: Sequence[dict[str, Any]], repository_file: Path | None
) -> tuple[list[Issue], list[str]]:
    """SIGN022 issues for runs of a built-in that used other expectations than the
    repository's file, and warnings for runs that record no sha256 (see the module doc)."""
    if repository_file is None:
        return [], []
    issues: list[Issue] = []
    warnings: list[str] = []
    committed = repository_path(backend)
    reference, note = reference_sha256(repository_file)
    for row in rows:
        if row["engine"]:
            continue  # the sign-off applies the repository's file to an engine run's skips
        files = ", ".join(row["runs"])
        used = row["file"] or "no file recorded"
        if row["recorded"] and row["sha256"] != reference:
            issues.append(
                UNCOMMITTED_EXPECTATIONS.issue(
                    f"{files} ran with the expectations of {used} (sha256 "
                    f"{_short(row['sha256'])}), not the repository's committed {committed} "
                    f"(sha256 {_short(reference)}){note}: its expected skips and xfails are "
                    f"not the suite's; re-run {backend} with the committed file",
                )
            )
        elif not row["recorded"] and row["file"] not in (None, committed):
            issues.append(
                UNCOMMITTED_EXPECTATIONS.issue(
                    f"{files} ran with the expectations of {used}, not the repository's "
                    f"committed {committed} (its sidecar records no sha256 of the file); "
                    f"re-run {backend} with the committed file",
                )
            )
        elif not row["recorded"]:
            warnings.append(
                f"{files}: the sidecar records no sha256 of its expectation file (a run made "
                f"before it was recorded); taken as the repository's {committed} by its path"
            )
    return issues, warnings


def _short(sha: str | None) -> str:
    return "none: no such file" if sha is None else sha[:12]
