"""What an engine run prints (#33 item 7): one reason per distinct error, and the deprecation
warnings of the engine's own stack filtered."""

from __future__ import annotations

import pytest

from conformance.engines.checks import grouped_reasons
from conformance.engines.target import VLLM

FLASHMLA = "RuntimeError: vllm._flashmla_C is not available, likely was not compiled"


def test_an_error_met_on_every_batch_kind_is_said_once() -> None:
    text = grouped_reasons({"decode": FLASHMLA, "mixed": FLASHMLA, "prefill": FLASHMLA})
    assert text == f"decode, mixed, prefill: {FLASHMLA}"
    assert text.count("_flashmla_C") == 1


def test_distinct_errors_keep_their_batch_kinds() -> None:
    assert grouped_reasons({"decode": "A", "mixed": "B", "prefill": "A"}) == (
        "decode, prefill: A; mixed: B"
    )
    assert grouped_reasons({}) == ""


# The modules that raised the 30 deprecation warnings of a vLLM 0.33.0 run
ENGINE_STACK = [
    "torch.jit._script",
    "flashinfer.fused_moe.cute_dsl.hopper.utils",
    "flashinfer.gemm.kernels.grouped_gemm_masked_blackwell",
    "cutlass.utils",
    "vllm.model_executor.layers.attention.mla_attention",
]


def _conftest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from conformance.engines.target import add_warning_filters, engine_target

        def pytest_configure(config):
            add_warning_filters(config, engine_target("vllm"))
        """
    )


def test_the_engine_stack_s_deprecations_are_filtered(pytester: pytest.Pytester) -> None:
    _conftest(pytester)
    raised = "\n".join(
        f"    warnings.warn_explicit('old', DeprecationWarning, 'x.py', 1, module={m!r})"
        for m in ENGINE_STACK
    )
    pytester.makepyfile(f"import warnings\n\ndef test_imports():\n{raised}\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "warnings summary" not in result.stdout.str()


@pytest.mark.parametrize("module", ["conformance.engines.checks", "test_mine", "vllmish.x"])
def test_the_suite_s_own_deprecations_still_show(pytester: pytest.Pytester, module: str) -> None:
    _conftest(pytester)
    pytester.makepyfile(
        "import warnings\n\ndef test_mine():\n"
        f"    warnings.warn_explicit('old', DeprecationWarning, 'x.py', 1, module={module!r})\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)


def test_the_filters_are_the_targets() -> None:
    assert VLLM.quiet_warnings and all(f.startswith("ignore::") for f in VLLM.quiet_warnings)


KNOWN = {"test_known.py::test_drops[unpadded]": "backend.py: unpadded() drops the field"}


def _known(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    pytester.makeconftest(
        f"""
        from conformance.engines.target import mark_known_findings

        def pytest_collection_modifyitems(config, items):
            assert mark_known_findings(items, {KNOWN!r}) == []
        """
    )
    pytester.makepyfile(
        test_known=f"""
        import pytest

        @pytest.mark.parametrize("name", ["unpadded", "replace"])
        def test_drops(name):
            {body}
        """
    )
    return pytester.runpytest("-p", "no:cacheprovider", "-rxX")


def test_a_release_s_known_finding_runs_as_a_strict_xfail(pytester: pytest.Pytester) -> None:
    result = _known(pytester, "assert name != 'unpadded', 'unpadded drops it'")
    result.assert_outcomes(passed=1, xfailed=1)
    assert "known finding: backend.py: unpadded() drops the field" in result.stdout.str()


def test_a_known_finding_that_no_longer_fails_fails_the_run(pytester: pytest.Pytester) -> None:
    _known(pytester, "pass").assert_outcomes(passed=1, failed=1)


def test_known_findings_of_no_collected_test_are_returned() -> None:
    from conformance.engines.target import mark_known_findings

    assert mark_known_findings([], KNOWN) == list(KNOWN)
    assert VLLM.known_findings("0.29.0") and not VLLM.known_findings("0.33.0")
