"""Only the harness reports a conformance test as not applicable, from the declaration.

A backend declaring bf16 only has its fp8 golden cases skipped by the harness with the
derived reason and the JUnit property ``not_applicable=suite``. A backend declaring fp8 KV
that skips its fp8 cases itself with a ``not applicable:`` reason gets unexplained skips
instead, naming its declaration.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import ClassVar
from xml.etree import ElementTree

import pytest
import torch

from backends import registry
from backends.base import DecodeMetadata, DecodeScales
from backends.cpu import CpuReferenceBackend
from conformance.applicability import TEST_RULES, Declaration, dtype_pair_id, not_applicable
from conformance.goldens import CASES
from conformance.harness.not_applicable import CLAIMED_ELSEWHERE
from conformance.numerics.fp8 import is_fp8

NUMERICS = Path(__file__).resolve().parents[2] / "conformance" / "test_numerics.py"
SELECTION = "test_decode_matches_golden and tiny"
TINY_FP8 = {case.id for case in CASES if case.tiny and case.has_fp8}


class Bf16Only(CpuReferenceBackend):
    """Honest: declares what it takes."""

    name: ClassVar[str] = "bf16-only"
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16,)
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16,)


class OptsOut(CpuReferenceBackend):
    """BROKEN: declares fp8 KV, then calls every fp8 cache not applicable itself."""

    name: ClassVar[str] = "opts-out"

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if is_fp8(kv_cache.dtype) or is_fp8(q.dtype):
            pytest.skip("not applicable: opts-out declares kv_dtypes=(bf16), the case is fp8")
        return super().decode_scaled(q, kv_cache, decode, scales)


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, backend) -> str:
    real = registry.get_backend
    monkeypatch.setattr(
        registry, "get_backend", lambda n: backend if n == backend.name else real(n)
    )
    junit = pytester.path / "out.xml"
    result = pytester.runpytest_inprocess(
        str(NUMERICS),
        f"--backend={backend.name}",
        "-p",
        "no:cacheprovider",
        "-k",
        SELECTION,
        f"--junitxml={junit}",
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    return junit.read_text()


def _skips(xml: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Case id -> (skip message, properties) of the skipped golden decode comparisons."""
    found = {}
    for testcase in ElementTree.fromstring(xml).iter("testcase"):
        skipped = testcase.find("skipped")
        name = testcase.get("name", "")
        if skipped is None or not name.startswith("test_decode_matches_golden["):
            continue
        properties = {p.get("name", ""): p.get("value", "") for p in testcase.iter("property")}
        found[name.split("[", 1)[1][:-1]] = (skipped.get("message", ""), properties)
    return found


def test_the_harness_skips_what_the_declaration_rules_out(pytester, monkeypatch) -> None:
    backend = Bf16Only()
    xml = _run(pytester, monkeypatch, backend)
    skips = _skips(xml)
    declaration = Declaration.of(backend)
    assert set(skips) == TINY_FP8, skips
    for case, (message, properties) in skips.items():
        node_id = f"tests/conformance/test_numerics.py::test_decode_matches_golden[{case}]"
        assert message == not_applicable(declaration, node_id)
        assert properties.get("not_applicable") == "suite"


def test_a_backend_opting_out_of_what_it_declares_gets_unexplained_skips(
    pytester, monkeypatch
) -> None:
    backend = OptsOut()
    xml = _run(pytester, monkeypatch, backend)
    skips = _skips(xml)
    assert set(skips) == TINY_FP8, skips
    for message, properties in skips.values():
        assert message.startswith(CLAIMED_ELSEWHERE), message
        assert Declaration.of(backend).words() in message
        assert "not_applicable" not in properties


def test_every_rule_names_a_conformance_test_that_exists() -> None:
    """A renamed test must not silently lose its rule (it would then run every case)."""
    for key in TEST_RULES:
        file_name, _, function = key.partition("::")
        source = (NUMERICS.parent / file_name).read_text(encoding="utf-8")
        assert not function or f"def {function}(" in source, key


def test_a_rule_that_needs_an_unknown_case_says_which() -> None:
    node_id = "tests/conformance/test_numerics.py::test_decode_matches_golden[no-such-case]"
    with pytest.raises(LookupError, match="'no-such-case' is not in the case table"):
        not_applicable(Declaration("cpu"), node_id)
    assert not_applicable(Declaration("cpu"), "tests/conformance/test_metadata.py::test_x") is None


def test_the_derivation_is_torch_free() -> None:
    code = "import sys, conformance.applicability; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=NUMERICS.parents[2])


def test_a_dtype_pair_test_is_judged_by_its_parameter_id() -> None:
    test = "tests/conformance/test_masking.py::"
    test += "test_no_token_outside_the_causal_window_reaches_the_output"
    fp8 = f"{test}[{dtype_pair_id(torch.float8_e4m3fn, torch.float8_e4m3fn)}]"
    assert not_applicable(Declaration("cpu"), fp8) == (
        "not applicable: cpu declares q_dtypes=(bf16), the case has q e4m3fn"
    )
    assert not_applicable(Declaration("cpu"), f"{test}[q-bf16-kv-bf16]") is None
