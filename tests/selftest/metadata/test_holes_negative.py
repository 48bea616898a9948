"""Negative controls of tests/conformance/test_metadata_holes.py (and the holes they close).

Each breaks one piece, shows that the family-A check it slipped past still passes, and
requires the new check to fail naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from backends import registry
from backends.cpu import CpuReferenceBackend, CpuReferenceBuilder
from benchmarks import metadata_runner
from conformance.metadata import transforms

pytestmark = pytest.mark.selftest

CONFORMANCE = Path(__file__).resolve().parents[3] / "tests" / "conformance"
HOLES = CONFORMANCE / "test_metadata_holes.py"
FAMILY_A = CONFORMANCE / "test_metadata.py"


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider", "-rf")


class QkWideWorkspaceBuilder(CpuReferenceBuilder):
    """BROKEN: sizes the chunked-prefill workspace from the q·k head dim (nope + rope)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        width = self.mla_dims.qk_nope_head_dim + self.mla_dims.qk_rope_head_dim
        self.workspace = torch.empty((self.workspace.shape[0], width), dtype=torch.bfloat16)


def test_a_workspace_of_the_wrong_width_is_caught(pytester, monkeypatch):
    attrs = {"name": "qk-wide-workspace", "builder_cls": lambda self: QkWideWorkspaceBuilder}
    broken = type("QkWideWorkspaceBackend", (CpuReferenceBackend,), attrs)()
    real = registry.get_backend
    monkeypatch.setattr(registry, "get_backend", lambda n: broken if n == broken.name else real(n))
    result = _run(pytester, str(HOLES), f"--backend={broken.name}", "-k", "workspace")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*workspace: 192 columns, expected kv_lora_rank + qk_rope*576*"])


def test_a_field_moved_onto_dropped_on_purpose_is_caught(pytester, monkeypatch):
    moved = {**transforms.DROPPED_ON_PURPOSE, "unpad": {"positions": "moved"}}
    monkeypatch.setattr(transforms, "DROPPED_ON_PURPOSE", moved)
    hole = _run(pytester, str(FAMILY_A), "-k", "every_optional_field_survives and unpad")
    hole.assert_outcomes(passed=1)  # the field is silently no longer checked there
    result = _run(pytester, str(HOLES), "-k", "dropped_on_purpose")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*DROPPED_ON_PURPOSE changed*positions*"])


def test_a_site_that_drops_the_upper_bound_is_caught(pytester, monkeypatch):
    real = metadata_runner.build_decode_metadata

    def forgets_upper_bound(*args: Any, **kwargs: Any):
        return real(*args, **kwargs).replace(seq_lens_cpu_upper_bound=None)

    monkeypatch.setattr(metadata_runner, "build_decode_metadata", forgets_upper_bound)
    hole = _run(pytester, str(FAMILY_A), "-k", "construction_site_output_validates and bench")
    hole.assert_outcomes(passed=1)  # a decode-only build never reads the upper bound
    result = _run(pytester, str(FAMILY_A), "-k", "builds_as_prefill")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*seq_lens_cpu_upper_bound*"])
