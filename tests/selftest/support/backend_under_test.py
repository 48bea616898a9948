"""A backend under test, in this process: `OnCpu` makes a vendor backend available on the
CPU (over a stand-in of its library); `decode_golden` runs a backend's own builder and
decode on a golden batch; `run_conformance` runs conformance tests on it under pytester
(`run_numerics`: the golden decodes), `failed_cases` and `assert_passes_what_it_declares`
read that run.

A test double of the selftests (importable as ``backend_under_test``: pyproject.toml puts
``tests/selftest/support`` on pytest's path).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from backends import registry
from backends.base import Availability, Backend, DecodeMetadata
from conformance.goldens import Golden, GoldenCase, GoldenStore, load_golden
from conformance.goldens.assertions import run_decode
from conformance.goldens.relayout import for_backend
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.stubs.protocol import MLAAttentionLayer

LAYER = "model.layers.0.self_attn.attn"
CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
NUMERICS = CONFORMANCE / "test_numerics.py"
MASKING = CONFORMANCE / "test_masking.py"


class OnCpu:
    """Mixed in before a backend's class: the backend is available, on the CPU."""

    def availability(self) -> Availability:
        return Availability(True)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


def decode_golden(
    backend: Backend, case_id: str
) -> tuple[Golden, DecodeMetadata, tuple[torch.Tensor, torch.Tensor]]:
    """The golden (re-laid where the backend's declaration needs it), the metadata the
    backend's own builder makes for its batch, and the backend's decode: ``(out, lse)``."""
    golden = for_backend(load_golden(GoldenStore(), case_id), backend)
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=golden.case.heads)
    builder = backend.make_builder(golden.builder_config("cpu"), [LAYER], {LAYER: layer})
    decode = builder.build(golden.cam("cpu")).decode
    return golden, decode, run_decode(backend, golden, decode)


def golden_cases() -> list[GoldenCase]:
    """Every case of the golden store's manifest."""
    return [
        GoldenCase.from_json(entry.case) for entry in GoldenStore().read_manifest().entries.values()
    ]


def run_conformance(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, backend: Backend, *args: str
) -> pytest.RunResult:
    """pytester's in-process run of the conformance tests `args` (paths and options) with
    ``--backend`` naming `backend`, which the registry gives for its name during the run."""
    real = registry.get_backend
    monkeypatch.setattr(
        registry, "get_backend", lambda name: backend if name == backend.name else real(name)
    )
    return pytester.runpytest_inprocess(
        *args, f"--backend={backend.name}", "-p", "no:cacheprovider", "-rfs"
    )


def run_numerics(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, backend: Backend
) -> pytest.RunResult:
    """`run_conformance` of the numerics contract's golden decodes."""
    return run_conformance(pytester, monkeypatch, backend, str(NUMERICS), "-k", "decode_matches")


def failed_cases(result: pytest.RunResult) -> set[str]:
    """The case ids of the run's failed tests (each node id's parameter, not its message's)."""
    failed = (re.match(r"^FAILED \S*?\[([^]]+)\]", line) for line in result.outlines)
    return {match.group(1) for match in failed if match}


def assert_passes_what_it_declares(
    result: pytest.RunResult, backend: Backend, *, at_least: int
) -> None:
    """`run_numerics` passed every golden case whose dtypes `backend` declares (`at_least`
    of them) and skipped the others."""
    __tracebackhide__ = True
    cases = golden_cases()
    claimed = [c for c in cases if not backend.dtype_skip(c.q_torch_dtype, c.kv_torch_dtype)]
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == len(claimed) >= at_least, outcomes
    assert outcomes.get("skipped") == len(cases) - len(claimed), outcomes
