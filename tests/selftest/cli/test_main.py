"""The ``python -m conformance`` dispatcher."""

from __future__ import annotations

import json

import pytest

from conformance.cli import main as cli


def test_backends_lists_every_registered_backend(capsys):
    assert cli.main(["backends", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {row["backend"] for row in rows} >= {"cpu", "cuda", "interpret", "rocm"}
    cpu = next(row for row in rows if row["backend"] == "cpu")
    assert cpu == {"backend": "cpu", "available": True, "reason": ""}


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["frobnicate"])
    assert exc.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_missing_dependency_is_named(monkeypatch, capsys):
    monkeypatch.setitem(cli.SUBCOMMANDS, "backends", ("no_such_module_xyz", "broken"))
    with pytest.raises(SystemExit) as exc:
        cli.main(["backends"])
    assert exc.value.code == 2
    assert "needs the Python package 'no_such_module_xyz'" in capsys.readouterr().err


def test_only_the_chosen_command_is_imported(monkeypatch):
    monkeypatch.setitem(cli.SUBCOMMANDS, "signoff", ("no_such_module_xyz", "broken"))
    assert cli.main(["backends"]) == 0


def test_backends_without_torch_says_what_is_missing() -> None:
    """`python -m conformance backends` from an interpreter with no torch: one line, exit 2."""
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys; sys.modules['torch'] = None; from conformance.cli.main import main; "
    code += "sys.exit(main(['backends']))"
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert "has no Python package 'torch'" in line and "requirements/cpu.txt" in line


def test_a_closed_pipe_ends_quietly() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for command in (["backends", "--json"], ["audit", "--format", "sarif", "conformance"]):
        run = subprocess.run(
            f"{sys.executable} -m conformance {' '.join(command)} | head -c 5",
            shell=True, capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert "Traceback" not in run.stderr, run.stderr
        assert "BrokenPipeError" not in run.stderr, run.stderr
