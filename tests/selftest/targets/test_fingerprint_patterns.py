"""Every file pattern that fingerprints evidence names at least one file of the tree: a
pattern left behind by a move would hash nothing and let a changed file go unnoticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.signoff.fingerprint import COMMON_FILES, unmatched_patterns
from conformance.targets import BUILTIN_TARGETS

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_every_common_pattern_matches_a_file() -> None:
    assert unmatched_patterns(COMMON_FILES, REPO_ROOT) == []


@pytest.mark.parametrize("name", list(BUILTIN_TARGETS))
def test_every_behaviour_pattern_of_a_built_in_target_matches_a_file(name: str) -> None:
    assert unmatched_patterns(BUILTIN_TARGETS[name].behaviour_files, REPO_ROOT) == []


def test_a_pattern_of_a_moved_module_is_named(tmp_path: Path) -> None:
    (tmp_path / "kernels" / "triton_mla").mkdir(parents=True)
    (tmp_path / "kernels" / "triton_mla" / "launch.py").write_text("", encoding="utf-8")
    patterns = ("kernels/triton_mla.py", "kernels/triton_mla/*.py", "kernels/gluon_mla/*.py")
    assert unmatched_patterns(patterns, tmp_path) == [
        "kernels/triton_mla.py",
        "kernels/gluon_mla/*.py",
    ]
