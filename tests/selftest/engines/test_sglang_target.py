"""The SGLang engine target's declaration, its platform check and CI's JUnit check on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.ci import engine_junit
from conformance.ci.engine_options import EngineSessionError, parse_options
from conformance.engines.sglang.platform import unsupported_platform
from conformance.engines.target import engine_target
from conformance.targets import BUILTIN_TARGETS

from synthetic_reports import write_engine_junit

SGLANG = engine_target("sglang")


def test_the_record_is_the_declarations_entry() -> None:
    assert SGLANG is BUILTIN_TARGETS["sglang"]
    assert (SGLANG.kind, SGLANG.default, SGLANG.release) == ("engine", False, False)
    assert SGLANG.distribution == "sglang" and SGLANG.tests == "tests/engines/sglang"
    assert SGLANG.python == "3.11"
    assert SGLANG.facts_file("0.5.23") == "sglang-0.5.23.facts.json"
    assert SGLANG.environment["TRITON_INTERPRET"] == "1"


def test_supported_versions_are_bounded() -> None:
    assert SGLANG.supports(SGLANG.version) is None
    assert "outside the releases" in (SGLANG.supports("0.5.15") or "")
    assert "outside the releases" in (SGLANG.supports("0.6.0") or "")


def test_options_are_named_after_the_engine() -> None:
    options = parse_options(SGLANG, ["--sglang-version", "0.5.24", "-k", "family_c"])
    assert options.version == "0.5.24" and options.pytest_args == ("-k", "family_c")
    with pytest.raises(EngineSessionError, match="--sglang-version"):
        parse_options(SGLANG, ["--sglang-version", "latest"])


@pytest.mark.parametrize(
    ("system", "machine", "libc", "says"),
    [
        ("Linux", "x86_64", ("glibc", "2.36"), None),
        ("Darwin", "arm64", ("", ""), "Linux x86_64, not Darwin arm64"),
        ("Linux", "aarch64", ("glibc", "2.39"), "Linux x86_64, not Linux aarch64"),
        ("Linux", "x86_64", ("glibc", "2.31"), "glibc >= 2.34, found glibc 2.31"),
        ("Linux", "x86_64", ("musl", "1.2"), "glibc >= 2.34, found musl 1.2"),
    ],
)
def test_a_platform_the_wheel_does_not_support_is_one_line(system, machine, libc, says) -> None:
    reason = unsupported_platform(system, machine, libc)
    if says is None:
        assert reason is None
    else:
        assert reason is not None and says in reason and "\n" not in reason


def test_junit_check_names_sglang_s_backends(tmp_path: Path) -> None:
    cases = {f"test_builder_builds[{b}]": "passed" for b in SGLANG.must_build}
    junit = write_engine_junit(tmp_path, "sglang", cases)
    assert engine_junit.problems(junit, SGLANG.must_build) == []
    assert engine_junit.main([str(junit)]) == 0
    cases["test_builder_builds[aiter]"] = "skipped"
    junit = write_engine_junit(tmp_path, "sglang", cases)
    assert engine_junit.problems(junit, SGLANG.must_build) == ["aiter did not build (skipped)"]
