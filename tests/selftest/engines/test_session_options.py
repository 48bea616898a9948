"""The vLLM session's options (#33 item 4): ``--tree`` must be a vLLM tree, the interpreter's
vLLM is exactly the one used, and a selection writes a partial report."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import venv
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.ci import engine_session
from conformance.ci.engine_options import (
    EngineOptions,
    EngineSessionError,
    EngineUsageError,
    check_interpreter_version,
    parse_options,
    selection_reason,
)
from conformance.engines.target import VLLM


def _vllm_tree(root: Path) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    return root


def test_a_tree_that_is_not_vllm_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    with pytest.raises(EngineUsageError, match=r"--tree .*: not a vllm tree"):
        parse_options(VLLM, ["--tree", str(tmp_path / "plugin")])


def test_a_vllm_tree_or_a_folder_inside_it_is_accepted(tmp_path: Path) -> None:
    root = _vllm_tree(tmp_path / "checkout")
    (root / "benchmarks").mkdir()
    for tree in (root, root / "benchmarks", root / "vllm"):
        assert parse_options(VLLM, ["--tree", str(tree)]).tree == tree


def test_an_explicit_version_is_told_from_the_default() -> None:
    assert not parse_options(VLLM, []).version_given
    given = parse_options(VLLM, ["--vllm-from-interpreter", "--vllm-version=0.34.0"])
    assert given.version_given and given.from_interpreter


def test_a_version_that_is_not_the_interpreter_s_is_refused() -> None:
    options = parse_options(VLLM, ["--vllm-from-interpreter", "--vllm-version", "0.34.0"])
    with pytest.raises(EngineUsageError, match="conflicts with --vllm-from-interpreter"):
        check_interpreter_version(VLLM, options, "0.33.0")
    check_interpreter_version(VLLM, options, "0.34.0")
    check_interpreter_version(VLLM, parse_options(VLLM, ["--vllm-from-interpreter"]), "0.1")


def test_an_interpreter_without_vllm_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = dataclasses.replace(VLLM, distribution="no_such_engine_dist")
    with pytest.raises(EngineSessionError, match="has no no_such_engine_dist"):
        engine_session.interpreter_engine(missing)


def _package(site: Path, version: str) -> None:
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")


def test_the_interpreter_s_vllm_shadows_what_an_earlier_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier run left vllm 0.33.0 in the session's environment; the interpreter has
    0.34.0: the session imports the interpreter's (before: the left-over one)."""
    venv.create(tmp_path / "env", with_pip=False)
    python = str(tmp_path / "env" / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    _package(Path(purelib), "0.33.0")
    interpreter_site = tmp_path / "interpreter-site"
    _package(interpreter_site, "0.34.0")
    monkeypatch.setattr("site.getsitepackages", lambda: [str(interpreter_site)])
    monkeypatch.setattr("site.getusersitepackages", lambda: str(tmp_path / "no-user-site"))
    engine_session.reach_interpreter(python)
    engine_session.same_engine(python, VLLM, str(interpreter_site / "vllm"))
    found = subprocess.run(
        [python, "-c", "import vllm, importlib.metadata as m; print(vllm.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert found == "0.34.0"


def test_another_copy_of_vllm_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _package(site, "0.33.0")
    # this interpreter's environment imports no vllm at all, let alone that copy
    with pytest.raises(EngineSessionError, match="not the interpreter's"):
        engine_session.same_engine(sys.executable, VLLM, str(site / "vllm"))


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ([], None),
        (["-x", "-q", "-p", "no:randomly", "--tb=short"], None),
        (["tests/engines/vllm"], None),
        (["-k", "family_c"], "-k family_c"),
        (["-kfamily_c"], "-k family_c"),
        (["-m", "negative_control"], "-m negative_control"),
        (["--deselect=tests/engines/vllm/test_family_a.py"], "--deselect tests/engines"),
        (["tests/engines/vllm/test_family_c.py"], "selected tests/engines/vllm/test_family_c"),
        (["tests/engines/vllm/test_family_c.py::test_x"], "selected tests/engines/vllm/test_"),
    ],
)
def test_a_selection_is_told_from_a_full_run(args: list[str], reason: str | None) -> None:
    found = selection_reason(VLLM, args)
    assert found == reason if reason is None else reason in (found or "")


class _Session:
    def __init__(self, tmp_path: Path) -> None:
        self.logged: list[str] = []
        self.virtualenv = SimpleNamespace(location=str(tmp_path / "env"))

    def log(self, text: str) -> None:
        self.logged.append(text)

    def error(self, text: str) -> None:
        raise AssertionError(text)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> _Session:
    """The session over a two-test engine folder, with this interpreter as its python."""
    tests = tmp_path / "engine_tests"
    tests.mkdir(exist_ok=True)
    (tests / "test_two.py").write_text(
        "import os\n\n"
        "def test_one():\n"
        "    with open(os.environ['MLA_ENGINE_FACTS'], 'w') as f:\n"
        "        f.write('{}')\n\n"
        "def test_two():\n    pass\n"
    )
    target = dataclasses.replace(VLLM, tests=str(tests))
    options = EngineOptions("0.33.0", False, None, tuple(args))
    monkeypatch.setattr(
        engine_session, "prepare", lambda s, t, r: (options, sys.executable, "0.33.0")
    )
    session = _Session(tmp_path)
    engine_session.run_session(session, target)
    return session


def test_a_selection_writes_a_partial_report_and_keeps_the_full_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _run(tmp_path, monkeypatch, [])
    full = tmp_path / "reports" / "junit" / "vllm.xml"
    before = full.read_bytes()
    session = _run(tmp_path, monkeypatch, ["-k", "one"])
    assert full.read_bytes() == before, "the partial run replaced the full report"
    partial = tmp_path / "reports" / "junit" / "partial" / "vllm.xml"
    sidecar = json.loads(partial.with_name("vllm.meta.json").read_text())
    assert (sidecar["selection"], sidecar["selection_reason"]) == ("partial", "-k one")
    assert sidecar["counts"]["tests"] == 1
    assert any("partial selection (-k one)" in line for line in session.logged)
    assert not (tmp_path / "reports" / "previous").exists()
    full_sidecar = json.loads(full.with_name("vllm.meta.json").read_text())
    assert full_sidecar["selection"] == "full" and full_sidecar["counts"]["tests"] == 2


def test_a_full_run_records_its_facts_checksum_and_a_partial_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conformance.engines.releases import MANIFEST, manifest_problems, read_manifest

    monkeypatch.chdir(tmp_path)
    _run(tmp_path, monkeypatch, [])
    engines = tmp_path / "reports" / "engines"
    assert list(read_manifest(engines)) == ["vllm-0.33.0.facts.json"]
    assert manifest_problems(engines) == []
    manifest = (engines / MANIFEST).read_bytes()
    _run(tmp_path, monkeypatch, ["-k", "one"])
    assert (engines / MANIFEST).read_bytes() == manifest
    assert (engines / "partial" / "vllm-0.33.0.facts.json").is_file()


def test_a_release_of_the_matrix_brings_its_own_pins() -> None:
    from conformance.ci.engine_session import replace_pins

    assert VLLM.release_pins("0.30.0") == ("transformers==5.17.0",)
    assert VLLM.release_pins("0.34.0") == ("flashinfer-python==0.7.4",)
    assert VLLM.release_pins("0.33.1") == ()
    pins = (*VLLM.release_pins("0.30.0"), "transformers==5.16.0")  # the user's --pin wins
    said: list[str] = []
    assert replace_pins(["transformers>=5.10.4", "torch==2.11.0"], pins, said.append) == [
        "transformers==5.16.0",
        "torch==2.11.0",
    ]
