"""Expectation files are part of the evidence.

A run records the expectation file it applied and its sha256. A built-in backend that ran with
any other file than the repository's committed one is refused (SIGN022): a private folder of
``skip:`` entries passed at run time must not turn 44 fp8 failures into "expected-skip". A
plug-in brings its own file: it signs off, but every page (md, html, json) lists each expected
skip and xfail with its reason, first of all on a release's page.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conformance.runs.expectations import DEFAULT_EXPECTATIONS_DIR
from conformance.signoff.engine import run_signoff
from conformance.signoff.machine import StaticView
from conformance.signoff.model import Status, Verdict
from conformance.signoff.report_html import render_html
from conformance.signoff.report_json import signoff_document
from conformance.signoff.report_md import render_markdown

from synthetic_reports import edit_sidecar, node_ids, offline_options, sha256_of, write_backend

pytestmark = pytest.mark.selftest

PLUGIN = "dense_torch"
FP8_TESTS = """
import pytest

@pytest.mark.parametrize("case", [f"bf16-{i}" for i in range(3)] + [f"fp8-{i}" for i in range(4)])
def test_decode(case):
    assert not case.startswith("fp8"), "this decode has no fp8 path"
"""
SKIPS = (
    "skip: tests/conformance/test_numerics.py::test_decode[fp8-{}]  # fp8 path not written yet\n"
)


def _view() -> StaticView:
    return StaticView(
        names=("cpu", "interpret", "cuda", "rocm", PLUGIN),
        runnable_names=("cpu", PLUGIN),
        plugin_names=(PLUGIN,),
    )


def _run(pytester: pytest.Pytester, backend: str, expectations: Path | None) -> Path:
    """A real run of `backend` through the report plugin; returns the reports directory."""
    pytester.makepyfile(**{"tests/conformance/test_numerics": FP8_TESTS})
    if expectations is not None:
        expectations.mkdir(exist_ok=True)
        (expectations / f"{backend}.txt").write_text(
            "".join(SKIPS.format(index) for index in range(4))
        )
    junit = pytester.path / "reports" / "junit"
    args = ["-p", "conformance.harness.reporting", "-p", "no:cacheprovider"]
    args += [f"--junitxml={junit}/{backend}.xml"]
    if expectations is not None:
        args.append(f"--expectations-dir={expectations}")
    pytester.runpytest(*args).assert_outcomes(passed=3, skipped=4 if expectations else 0)
    return pytester.path / "reports"


def test_the_sidecar_records_the_file_and_its_sha256(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", PLUGIN)
    private = pytester.path / "private"
    reports = _run(pytester, PLUGIN, private)
    sidecar = json.loads((reports / "junit" / f"{PLUGIN}.meta.json").read_text())
    assert sidecar["expectations_file"] == f"private/{PLUGIN}.txt"
    assert sidecar["expectations_sha256"] == sha256_of(private / f"{PLUGIN}.txt")


def test_a_builtin_backend_run_with_private_expectations_is_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", "cpu")
    reports = _run(pytester, "cpu", pytester.path / "private")
    result = run_signoff(offline_options(reports, write=False))
    cpu = result.backends["cpu"]
    assert (result.verdict, cpu.status, cpu.code) == (
        Verdict.INCOMPLETE,
        Status.INCOMPLETE,
        "SIGN022",
    ), cpu.reason
    assert "private/cpu.txt" in cpu.reason and "conformance/expectations/cpu.txt" in cpu.reason


def test_a_builtin_backend_run_with_the_repositorys_file_signs_off(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(**{"tests/conformance/test_metadata": "def test_a():\n    pass\n"})
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", "cpu")
    junit = pytester.path / "reports" / "junit"
    pytester.runpytest(
        "-p", "conformance.harness.reporting", "-p", "no:cacheprovider",
        f"--junitxml={junit}/cpu.xml",
    ).assert_outcomes(passed=1)  # fmt: skip
    sidecar = json.loads((junit / "cpu.meta.json").read_text())
    assert sidecar["expectations_sha256"] == sha256_of(DEFAULT_EXPECTATIONS_DIR / "cpu.txt")
    result = run_signoff(offline_options(junit.parent, write=False))
    assert result.backends["cpu"].status == Status.PASS, result.backends["cpu"].reason
    rows = result.backends["cpu"].expectation_files
    assert [(row["repository"], row["runs"]) for row in rows] == [(True, ["cpu.xml"])]


def test_the_signoffs_own_expectations_dir_never_explains_a_builtin_backend(
    tmp_path: Path,
) -> None:
    ids = node_ids("metadata", 4)
    write_backend(
        tmp_path / "junit", "cpu", ids, outcomes={ids[0]: "skipped"}, messages={ids[0]: "later"}
    )
    private = tmp_path / "private"
    private.mkdir()
    (private / "cpu.txt").write_text(f"skip: {ids[0]}  # later\n")
    options = offline_options(tmp_path, write=False)
    options.expectations_dir = private  # what `signoff --expectations-dir private` sets
    cpu = run_signoff(options).backends["cpu"]
    assert (cpu.status, cpu.code) == (Status.INCOMPLETE, "SIGN012"), cpu.reason


@pytest.mark.parametrize(
    ("recorded", "refused"),
    [("conformance/expectations/cpu.txt", False), (None, False), ("/tmp/mine/cpu.txt", True)],
)
def test_a_sidecar_without_the_sha256_is_taken_at_its_recorded_path(
    tmp_path: Path, recorded: str | None, refused: bool
) -> None:
    (junit,) = write_backend(tmp_path / "junit", "cpu", node_ids("metadata", 4))
    if recorded is not None:
        edit_sidecar(junit.with_name("cpu.meta.json"), expectations_file=recorded)
    cpu = run_signoff(offline_options(tmp_path, write=False)).backends["cpu"]
    if refused:
        assert (cpu.status, cpu.code) == (Status.INCOMPLETE, "SIGN022"), cpu.reason
    else:
        assert cpu.status == Status.PASS, cpu.reason
        assert any("records no sha256 of its expectation file" in w for w in cpu.warnings)


def _plugin_document(pytester: pytest.Pytester, **changes: object) -> dict:
    reports = _run(pytester, PLUGIN, pytester.path / "private")
    result = run_signoff(offline_options(reports, write=False, backends=_view(), **changes))
    return signoff_document(result)


def test_a_plugins_expected_skips_are_each_shown_with_their_reason_on_every_page(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", PLUGIN)
    document = _plugin_document(pytester, require=[PLUGIN])
    assert document["verdict"] == "PASS", document["blocking"]
    skipped = [f"tests/conformance/test_numerics.py::test_decode[fp8-{i}]" for i in range(4)]
    listed = [(row["id"], row["outcome"]) for row in document["expected_outcomes"]]
    assert listed == [(node_id, "expected-skip") for node_id in skipped]
    assert all("fp8 path not written yet" in row["reason"] for row in document["expected_outcomes"])
    markdown, html = render_markdown(document), render_html(document)
    for node_id in skipped:
        assert node_id in markdown and node_id in html
    reason = f"expected skip ({PLUGIN}.txt:1): fp8 path not written yet"
    assert reason in markdown and reason in html
    assert f"private/{PLUGIN}.txt" in markdown and f"private/{PLUGIN}.txt" in html
    assert "the plug-in's own file" in markdown


def test_a_release_signoff_lists_them_first(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLA_CONFORMANCE_BACKEND", PLUGIN)
    document = _plugin_document(pytester, release=True, require=[PLUGIN])
    markdown, html = render_markdown(document), render_html(document)
    assert markdown.index("Expected skips and xfails") < markdown.index("What stops a PASS")
    assert html.index("Expected skips and xfails") < html.index("What stops a PASS")
    plain = signoff_document(
        run_signoff(
            offline_options(
                pytester.path / "reports", write=False, backends=_view(), require=[PLUGIN]
            )
        )
    )
    text = render_markdown(plain)
    assert text.index("What stops a PASS") < text.index("Expected skips and xfails")


def _git(repository: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repository), *args], check=True, capture_output=True, timeout=60
    )


@pytest.mark.parametrize("committed", [True, False])
def test_the_repositorys_file_is_the_committed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, committed: bool
) -> None:
    """A run that used the checkout's copy of cpu.txt with an entry not committed yet is
    refused: the entry is not the suite's until it is committed."""
    if shutil.which("git") is None:
        pytest.skip("not applicable: git is not installed")
    monkeypatch.delenv("MLA_CONFORMANCE_GIT_COMMIT", raising=False)
    repository = tmp_path / "checkout"
    expectations = repository / "conformance" / "expectations"
    expectations.mkdir(parents=True)
    ids = node_ids("metadata", 4)
    (expectations / "cpu.txt").write_text("# cpu\n")
    _git(repository, "init", "-q")
    _git(repository, "add", ".")
    _git(repository, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    if not committed:
        (expectations / "cpu.txt").write_text(f"# cpu\nskip: {ids[0]}  # not today\n")
    (junit,) = write_backend(tmp_path / "reports" / "junit", "cpu", ids)
    edit_sidecar(
        junit.with_name("cpu.meta.json"),
        expectations_file="conformance/expectations/cpu.txt",
        expectations_sha256=sha256_of(expectations / "cpu.txt"),
    )
    options = offline_options(tmp_path / "reports", write=False, expectations_dir=expectations)
    cpu = run_signoff(options).backends["cpu"]
    if committed:
        assert cpu.status == Status.PASS, cpu.reason
    else:
        assert (cpu.status, cpu.code) == (Status.INCOMPLETE, "SIGN022"), cpu.reason
        assert "uncommitted changes" in cpu.reason
