"""Hostile trees: each a named problem, exit 2, the rest still audited, bounded."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.audit import Options, run_audit
from conformance.audit import tree as tree_module

REPO = Path(__file__).resolve().parents[3]
BROKEN = """\
from vllm.v1.attention.backend import CommonAttentionMetadata


def build(t):
    return CommonAttentionMetadata(query_start_loc=t)
"""
DEFINITION = """\
from dataclasses import dataclass


@dataclass
class CommonAttentionMetadata:
    query_start_loc: object
    num_reqs: int
"""


def _tree(root: Path) -> Path:
    (root / "vllm" / "v1" / "attention").mkdir(parents=True)
    (root / "vllm" / "v1" / "attention" / "backend.py").write_text(DEFINITION)
    (root / "bench.py").write_text(BROKEN)
    return root


def _problems(report) -> dict[str, str]:
    return {Path(p.path).name: p.name for p in report.problems}


def _assert_rest_audited(report) -> None:
    assert any(f.code == "CAM001" and f.path.endswith("bench.py") for f in report.findings)
    assert report.exit_code == 2


def test_symlink_loop_is_named_and_the_rest_audited(tmp_path):
    root = _tree(tmp_path)
    (root / "loop").symlink_to(root)
    (root / "self.py").symlink_to(root / "self.py")
    report = run_audit([root], options=Options(jobs=1))
    assert _problems(report) == {"loop": "symlink-loop", "self.py": "symlink-loop"}
    _assert_rest_audited(report)


def test_fifo_and_device_are_never_opened(tmp_path):
    root = _tree(tmp_path)
    os.mkfifo(root / "pipe.py")
    (root / "zero.py").symlink_to("/dev/zero")  # out of the tree: named, never opened
    expected = {"pipe.py": "not-a-regular-file", "zero.py": "link-outside-root"}
    try:
        os.mknod(root / "null.py", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        expected["null.py"] = "not-a-regular-file"
    except OSError:
        pass  # not allowed to make a device here: the FIFO and the link still count
    started = time.monotonic()
    report = run_audit([root], options=Options(jobs=1))
    assert time.monotonic() - started < 10
    assert _problems(report) == expected
    assert "FIFO" in report.to_text() and "/dev/zero, outside the audited tree" in report.to_text()
    if "null.py" in expected:
        assert "character device" in report.to_text()
    _assert_rest_audited(report)


def test_content_problems_are_named(tmp_path):
    root = _tree(tmp_path)
    (root / "nul.py").write_bytes(b"x = 1\n\0\n")
    (root / "latin.py").write_bytes(b"x = '\xe9'\n")
    (root / "declared.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n")
    (root / "deep.py").write_text("x = " + "+".join(["1"] * 200_000) + "\n")
    (root / "deep_anchored.py").write_text(
        "ctx = static_forward_context = " + "+".join(["1"] * 200_000) + "\n"
    )
    (root / "big.py").write_text("x = 1\n" * 400)
    (root / "bad.py").write_text("static_forward_context = {\ndef (:\n")
    report = run_audit([root], options=Options(jobs=1, max_file_size=2_000))
    unlimited = _problems(run_audit([root], options=Options(jobs=1)))
    assert unlimited["deep_anchored.py"] == "too-deep" and "deep.py" not in unlimited
    problems = _problems(report)
    assert problems == {
        "nul.py": "nul-byte",
        "latin.py": "not-utf8",
        "deep.py": "too-large",
        "big.py": "too-large",
        "bad.py": "syntax-error",
        "deep_anchored.py": "too-large",
    }
    _assert_rest_audited(report)
    deep_only = run_audit([root / "deep.py"], options=Options(jobs=1))
    assert _problems(deep_only) == {"deep.py": "too-deep"}


def test_unlistable_and_unreadable_are_named(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    (root / "locked").mkdir()
    (root / "locked" / "x.py").write_text("x = 1\n")
    (root / "secret.py").write_text("x = 1\n")
    real_scandir, real_open = os.scandir, os.open

    def scandir(path):  # root may read anything: simulate a folder without read permission
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    def fake_open(path, flags, *args):
        if str(path).endswith("secret.py"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(tree_module.os, "scandir", scandir)
    monkeypatch.setattr("conformance.audit.loader.os.open", fake_open)
    report = run_audit([root], options=Options(jobs=1))
    assert _problems(report) == {"locked": "unlistable-dir", "secret.py": "unreadable"}
    _assert_rest_audited(report)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file and folder")
def test_real_permissions(tmp_path):
    root = _tree(tmp_path)
    (root / "locked").mkdir()
    (root / "locked").chmod(0o100)
    try:
        report = run_audit([root], options=Options(jobs=1))
    finally:
        (root / "locked").chmod(0o700)
    assert _problems(report) == {"locked": "unlistable-dir"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "conformance.audit.cli", *args, "--no-cache", "--no-config"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_fifo_or_loop_given_as_path_gets_a_proper_message(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    fifo = _cli(str(tmp_path / "pipe.py"))
    assert fifo.returncode == 2 and "a FIFO, not a directory or .py file" in fifo.stderr
    loop = _cli(str(tmp_path / "loop"))
    assert loop.returncode == 2 and "a symbolic link loop" in loop.stderr
    missing = _cli(str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr


def test_problems_exit_2_from_the_command_line_with_findings_printed(tmp_path):
    root = _tree(tmp_path)
    os.mkfifo(root / "pipe.py")
    result = _cli(str(root))
    assert result.returncode == 2
    assert "PROBLEM not-a-regular-file" in result.stdout and "CAM001" in result.stdout


def test_missing_definition_is_said_once_and_sites_not_judged(tmp_path):
    (tmp_path / "a.py").write_text(BROKEN)
    (tmp_path / "b.py").write_text(BROKEN)
    report = run_audit([tmp_path], options=Options(jobs=1))
    assert [f.code for f in report.findings] == ["CAM007"]
    assert report.exit_code == 0  # a warning
    with_definition = tmp_path.parent / "definition.py"
    with_definition.write_text(DEFINITION)
    report = run_audit([tmp_path], definition_file=str(with_definition), options=Options(jobs=1))
    assert sorted(f.code for f in report.findings) == ["CAM001", "CAM001"]
