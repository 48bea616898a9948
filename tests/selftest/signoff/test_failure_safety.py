"""A sign-off that fails leaves no earlier verdict standing; bad options are usage errors;
a closed pipe is no crash."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.signoff import cli, engine

from synthetic_reports import node_ids, write_backend

IDS = node_ids("metadata", 6)
REPOSITORY = Path(__file__).resolve().parents[3]
OUTPUTS = ("conformance.xml", "signoff.md", "signoff.json", "signoff.html")


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.main(parser.parse_args(list(argv)))


@pytest.fixture
def reports(tmp_path: Path, monkeypatch) -> Path:
    write_backend(tmp_path / "reports" / "junit", "cpu", IDS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(engine.machine.RegistryView, "runnable", lambda self: ["cpu"])
    return tmp_path / "reports"


def test_a_crashing_sign_off_removes_the_earlier_verdict(reports: Path, monkeypatch) -> None:
    assert run_cli("--reports", str(reports), "--no-evidence") == 0
    assert all((reports / name).exists() for name in OUTPUTS)

    def crash(*args, **kwargs):
        raise RuntimeError("a bug in the sign-off")

    monkeypatch.setattr(engine, "discover", crash)
    with pytest.raises(RuntimeError, match="a bug"):
        run_cli("--reports", str(reports), "--no-evidence")
    assert not [name for name in OUTPUTS if (reports / name).exists()]


def test_a_failed_write_removes_the_outputs_already_written(reports: Path, monkeypatch) -> None:
    assert run_cli("--reports", str(reports), "--no-evidence") == 0
    real = engine.atomic_write_bytes

    def disk_full(path: Path, data: bytes) -> None:
        if path.name == "signoff.json":
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(engine, "atomic_write_bytes", disk_full)
    assert run_cli("--reports", str(reports), "--no-evidence") == 2
    assert not [name for name in OUTPUTS if (reports / name).exists()]


def test_reports_that_do_not_exist_are_a_usage_error(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nonexistent"
    assert run_cli("--reports", str(missing)) == 2
    assert "--reports" in capsys.readouterr().err and not missing.exists()


def test_a_baseline_that_is_no_sign_off_is_a_usage_error(reports: Path, capsys) -> None:
    (reports / "old.json").write_text(json.dumps({"verdict": "PASS"}))
    assert (
        run_cli("--reports", str(reports), "--no-evidence", "--baseline", str(reports / "old.json"))
        == 2
    )
    assert "has no per-test 'outcomes'" in capsys.readouterr().err
    assert run_cli("--reports", str(reports), "--baseline", str(reports / "none.json")) == 2


def test_a_closed_pipe_is_no_crash(reports: Path) -> None:
    """``| head -1`` that has gone already: every write meets a closed pipe."""
    command = [sys.executable, "-m", "conformance", "signoff", "--reports", str(reports),
               "--no-evidence", "--require", "cpu"]  # fmt: skip
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        completed = subprocess.run(
            command,
            cwd=reports.parent,
            stdout=write_end,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    errors = completed.stderr.decode()
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors
    assert completed.returncode == 0, "the verdict's exit code, not a crash"
    assert json.loads((reports / "signoff.json").read_text())["verdict"] == "PASS"
