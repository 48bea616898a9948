"""An engine target required but not run: the reason says it is an engine and how to run it.

`--require vllm` before `nox -s vllm` ran must not read as an unknown backend ("no backend
named 'vllm' is registered"): vllm is no backend, its own session writes its report.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from conformance.signoff.engine import run_signoff
from conformance.signoff.machine import RegistryView, engine_not_run
from conformance.signoff.model import Status, Verdict

from synthetic_reports import node_ids, offline_options, write_backend

pytestmark = pytest.mark.selftest


def test_the_reason_names_the_engine_session() -> None:
    reason = engine_not_run("vllm")
    assert "engine target" in reason and "`nox -s vllm`" in reason and "vllm.xml" in reason


def test_the_registry_view_gives_the_engine_reason_before_asking_the_registry() -> None:
    assert RegistryView().unavailable_reason("vllm") == engine_not_run("vllm")


def test_a_required_engine_that_did_not_run_blocks_with_the_engine_reason(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write_backend(reports / "junit", "cpu", node_ids("metadata", 3))
    options = offline_options(reports, require=("vllm",), write=False)
    view = replace(options.backends, reasons={"vllm": engine_not_run("vllm")})
    result = run_signoff(replace(options, backends=view))
    assert result.verdict == Verdict.INCOMPLETE
    assert result.backends["vllm"].status == Status.NOT_RUN
    assert any("nox -s vllm" in line for line in result.blocking), result.blocking
