"""Plug-ins come and go: the required set follows what was asked this time.

A plug-in installed once stays installed in a reused environment; it must not become
required by a later plain sign-off. A plug-in's report left behind after the plug-in is gone
is shown as not judged, not an INCOMPLETE. Naming the plug-in with ``--require`` still
requires it (the negative control: a plug-in that did not run then blocks).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.harness.plugins_env import PLUGINS_ENV, install_plugins
from conformance.signoff.engine import run_signoff
from conformance.signoff.machine import StaticView
from conformance.signoff.model import Status, Verdict

from plugin_install import EXAMPLE, REPO, pip_target
from synthetic_reports import junit_xml, node_ids, offline_options, write_backend

pytestmark = pytest.mark.selftest

PLUGIN = "dense_torch"
IDS = node_ids("metadata", 6) + node_ids("stubs", 4)


def _view(*, plugin_runnable: bool = True) -> StaticView:
    """cpu runs here; a plug-in is installed (and runnable unless told otherwise)."""
    return StaticView(
        names=("cpu", "interpret", "cuda", "rocm", PLUGIN),
        runnable_names=("cpu", PLUGIN) if plugin_runnable else ("cpu",),
        plugin_names=(PLUGIN,),
        reasons={name: f"backend {name} unavailable: none here" for name in ("cuda", "rocm")},
    )


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    write_backend(tmp_path / "reports" / "junit", "cpu", IDS)
    write_backend(tmp_path / "reports" / "junit", "interpret", IDS)
    return tmp_path / "reports"


def test_an_installed_plugin_is_not_required_by_a_plain_signoff(reports: Path) -> None:
    result = run_signoff(offline_options(reports, backends=_view(), write=False))
    assert PLUGIN not in result.required
    assert result.verdict == Verdict.PASS, result.blocking
    assert PLUGIN not in result.backends, "a plug-in with no report is not listed"


def test_a_plugin_named_with_require_is_required(reports: Path) -> None:
    result = run_signoff(offline_options(reports, backends=_view(), write=False, require=[PLUGIN]))
    assert result.required == [PLUGIN]
    assert result.backends[PLUGIN].status == Status.NOT_RUN
    assert result.verdict == Verdict.INCOMPLETE
    assert any(line.startswith(f"{PLUGIN}: required but not run") for line in result.blocking)


def test_a_plugin_report_is_judged_while_the_plugin_is_installed(reports: Path) -> None:
    write_backend(reports / "junit", PLUGIN, IDS, outcomes={IDS[0]: "failed"})
    result = run_signoff(offline_options(reports, backends=_view(), write=False))
    assert result.backends[PLUGIN].status == Status.FAIL
    assert result.verdict == Verdict.FAIL, "a failing plug-in blocks even when not required"


def test_a_leftover_plugin_report_without_the_plugin_is_shown_not_judged(reports: Path) -> None:
    (leftover,) = write_backend(reports / "junit", PLUGIN, IDS, outcomes={IDS[0]: "failed"})
    gone = StaticView(names=("cpu", "interpret", "cuda", "rocm"), runnable_names=("cpu",))
    result = run_signoff(offline_options(reports, backends=gone))
    assert result.verdict == Verdict.PASS, (result.blocking, result.errors)
    shown = result.backends[PLUGIN]
    assert shown.status == Status.NOT_RUN and not shown.required
    assert leftover.name in shown.reason and "not installed" in shown.reason
    document = json.loads((reports / "signoff.json").read_text())
    assert any(row["backend"] == PLUGIN for row in document["not_signed_off"])


def test_a_report_of_an_unknown_backend_without_a_run_sidecar_stays_an_error(
    reports: Path,
) -> None:
    path = reports / "junit" / f"{PLUGIN}.xml"
    path.write_text(junit_xml([], suite_name=f"mla-{PLUGIN}"))
    gone = StaticView(names=("cpu", "interpret", "cuda", "rocm"), runnable_names=("cpu",))
    result = run_signoff(offline_options(reports, backends=gone, write=False))
    assert result.verdict == Verdict.INCOMPLETE
    assert any(str(path) in error for error in result.errors)


def test_a_plugin_left_in_the_environment_is_not_required(tmp_path: Path) -> None:
    """Subprocess level: the example plug-in installed, a plain sign-off without reports."""
    target, source = tmp_path / "env", tmp_path / "src" / EXAMPLE.name
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    install_plugins(pip_target(target), {PLUGINS_ENV: str(source)})
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = "from backends.registry import available_backends as a; print(a())"
    listed = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert PLUGIN in listed.stdout, ("the plug-in must be installed and runnable", listed.stderr)
    reports = tmp_path / "reports"
    reports.mkdir()
    signoff = [sys.executable, "-m", "conformance", "signoff", "--reports", str(reports)]
    subprocess.run([*signoff, "--no-evidence"], env=env, cwd=REPO, capture_output=True)
    document = json.loads((reports / "signoff.json").read_text())
    assert "cpu" in document["required"]
    assert PLUGIN not in document["required"]
    assert not any(PLUGIN in line for line in document["blocking"])
    required = subprocess.run(
        [*signoff, "--no-evidence", "--require", PLUGIN], env=env, cwd=REPO, capture_output=True
    )
    assert required.returncode == 3
    document = json.loads((reports / "signoff.json").read_text())
    assert any(line.startswith(f"{PLUGIN}: required but not run") for line in document["blocking"])


def test_a_plugin_report_inside_evidence_is_named_not_dropped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    from synthetic_reports import write_evidence

    reports = tmp_path / "reports"
    evidence = reports / "evidence" / "2026-01-02-cuda"
    write_evidence(evidence, "cuda", IDS)
    (stray,) = write_backend(evidence, PLUGIN, IDS)
    gone = StaticView(names=("cpu", "interpret", "cuda", "rocm"), runnable_names=("cpu",))
    result = run_signoff(
        offline_options(reports, backends=gone, evidence_dir=reports / "evidence", write=False)
    )
    assert any(str(stray) in issue for issue in result.backends["cuda"].issues)
    assert result.backends["cuda"].status == Status.INCOMPLETE
