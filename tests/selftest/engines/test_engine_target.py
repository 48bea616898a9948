"""The engine target's description, the session's arguments and CI's JUnit check."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.ci import engine_junit
from conformance.ci.engine_options import EngineSessionError, parse_options, usage
from conformance.ci.engine_session import replace_pins
from conformance.engines.target import VLLM

from synthetic_reports import write_engine_junit

BUILT = {f"test_builder_builds[{b}]": "passed" for b in VLLM.must_build}


def test_supported_versions_are_bounded() -> None:
    assert VLLM.supports(VLLM.version) is None
    assert "outside the releases" in (VLLM.supports("0.20.1") or "")
    assert "outside the releases" in (VLLM.supports("1.0.0") or "")
    assert VLLM.supports("0.34.0rc1") is None
    assert VLLM.facts_file("0.33.0") == "vllm-0.33.0.facts.json"


def test_session_arguments(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    options = parse_options(VLLM, ["--vllm-version", "0.34.0", "--tree", str(tmp_path), "-x"])
    assert (options.version, options.tree, options.pytest_args) == ("0.34.0", tmp_path, ("-x",))
    assert parse_options(VLLM, ["--vllm-from-interpreter"]).from_interpreter
    assert parse_options(VLLM, []).version == VLLM.version


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_shows_usage_and_passes_nothing_to_pytest(flag: str) -> None:
    options = parse_options(VLLM, ["--vllm-version", "0.34.0", flag, "-x"])
    assert options.show_usage and options.pytest_args == ()
    assert not parse_options(VLLM, ["-x"]).show_usage
    text = usage(VLLM)
    for option in ("--vllm-version X", "--vllm-from-interpreter", "--tree PATH", "0.35.0"):
        assert option in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vllm-version"], "--vllm-version needs a value"),
        (["--vllm-version", "latest!"], "not a release number"),
        (["--tree", "/nonexistent/tree"], "not a directory"),
        (["--pin"], "--pin needs a value"),
        (["--pin", "flashinfer-python>=0.7"], "expected NAME==VERSION"),
    ],
)
def test_bad_session_arguments_are_one_line(args: list[str], message: str) -> None:
    with pytest.raises(EngineSessionError, match=message):
        parse_options(VLLM, args)


def test_junit_check_passes_when_every_required_builder_built(tmp_path: Path) -> None:
    junit = write_engine_junit(tmp_path, "vllm", BUILT)
    assert engine_junit.problems(junit, VLLM.must_build) == []
    assert engine_junit.main([str(junit)]) == 0


@pytest.mark.parametrize("state", ["skipped", "failed", "missing"])
def test_junit_check_fails_when_a_builder_did_not_build(tmp_path: Path, state: str) -> None:
    cases = dict(BUILT)
    if state == "missing":
        del cases["test_builder_builds[ROCM_AITER_MLA]"]
    else:
        cases["test_builder_builds[ROCM_AITER_MLA]"] = state
    junit = write_engine_junit(tmp_path, "vllm", cases)
    found = engine_junit.problems(junit, VLLM.must_build)
    assert any("ROCM_AITER_MLA did not build" in problem for problem in found)
    assert engine_junit.main([str(junit)]) == 1


def test_junit_check_fails_on_any_failed_test(tmp_path: Path) -> None:
    cases = {**BUILT, "test_stub_without_q_lora_rank_fails_naming_it": "failed"}
    junit = write_engine_junit(tmp_path, "vllm", cases)
    assert engine_junit.problems(junit, VLLM.must_build) == [
        "test_stub_without_q_lora_rank_fails_naming_it failure"
    ]


def test_junit_check_refuses_an_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "vllm.xml").write_text("<not xml")
    assert "not a readable JUnit file" in engine_junit.problems(tmp_path / "vllm.xml", ())[0]


def test_the_engine_record_is_the_declarations_entry(tmp_path: Path) -> None:
    from conformance.signoff.machine import StaticView, known_backends
    from conformance.targets import BUILTIN_TARGETS, engine_names

    assert VLLM is BUILTIN_TARGETS["vllm"]
    assert engine_names() == ("vllm", "vllm_gpu", "sglang")
    assert (VLLM.kind, VLLM.default, VLLM.release) == ("engine", False, False)
    assert "vllm" in known_backends(StaticView(names=("cpu",)), tmp_path)
    (tmp_path / "nothing.xml").write_text("<testsuites/>")
    assert engine_junit.main([str(tmp_path / "nothing.xml")]) == 2


def test_a_pin_replaces_the_release_s_own_pin_of_that_name() -> None:
    options = parse_options(VLLM, ["--pin", "flashinfer_python==0.7.4", "-x"])
    assert options.pins == ("flashinfer_python==0.7.4",) and options.pytest_args == ("-x",)
    said: list[str] = []
    pinned = ["numpy", "flashinfer-python==0.7.3", "torch==2.14.0"]
    assert replace_pins(pinned, options.pins, said.append) == [
        "numpy",
        "flashinfer_python==0.7.4",
        "torch==2.14.0",
    ]
    assert said == ["--pin: flashinfer-python==0.7.3 replaced by flashinfer_python==0.7.4"]


def test_a_pin_of_nothing_the_release_requires_is_refused() -> None:
    with pytest.raises(EngineSessionError, match="the release requires no no-such-dist"):
        replace_pins(["numpy"], ("no-such-dist==1.0",), lambda line: None)


def test_every_declared_engine_target_is_whole() -> None:
    """Each engine entry is an `EngineTarget` that names its tests and its builders."""
    from conformance.engines.target import engine_target
    from conformance.targets import engine_names

    for name in engine_names():
        target = engine_target(name)
        assert target.name == name and target.must_build and target.tests.startswith("tests/")
