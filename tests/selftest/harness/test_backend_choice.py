"""The backend under test is resolved once, by the conformance plugin, and read from its stash;
"is this a conformance test" has one answer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.harness import plugin, run_state

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]


def _config(option: str | None) -> SimpleNamespace:
    return SimpleNamespace(stash=pytest.Stash(), getoption=lambda name: option)


def test_the_option_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", "interpret")
    assert plugin.chosen_backend(_config("cuda")) == "cuda"  # type: ignore[arg-type]
    assert plugin.chosen_backend(_config(None)) == "interpret"  # type: ignore[arg-type]
    monkeypatch.delenv("MLA_CONFORMANCE_BACKEND")
    assert plugin.chosen_backend(_config(None)) == "cpu"  # type: ignore[arg-type]


def test_it_is_resolved_once_and_everyone_reads_the_stash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", "rocm")
    config = _config(None)
    assert plugin.chosen_backend(config) == "rocm"  # type: ignore[arg-type]
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", "cuda")  # too late: already resolved
    assert plugin.chosen_backend(config) == "rocm"  # type: ignore[arg-type]
    assert run_state.backend_name(config) == "rocm"  # type: ignore[arg-type]
    assert config.stash[plugin.BACKEND_KEY] == "rocm"


def test_the_variable_is_named_in_one_module() -> None:
    sources = [*REPO_ROOT.glob("conformance/**/*.py"), *REPO_ROOT.glob("backends/**/*.py")]
    naming = [
        path.relative_to(REPO_ROOT).as_posix()
        for path in [*sources, REPO_ROOT / "noxfile.py"]
        if '"MLA_CONFORMANCE_BACKEND"' in path.read_text(encoding="utf-8")
    ]
    assert naming == ["conformance/runs/environment.py"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("tests/conformance/test_numerics.py", True),
        ("/elsewhere/copy/tests/conformance/test_plan.py", True),
        ("tests/conformance/conftest.py", False),
        ("tests/selftest/conformance/test_x.py", False),
        ("tests/selftest/harness/test_backend_choice.py", False),
    ],
)
def test_one_rule_says_what_a_conformance_test_is(path: str, expected: bool) -> None:
    assert plugin.is_conformance_test(Path(path)) is expected
