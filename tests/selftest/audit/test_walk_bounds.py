"""The walk never leaves its root: links out, special filesystems, loops and size bounds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.audit import Options, run_audit
from conformance.audit import mounts as mounts_module
from conformance.audit import tree as tree_module

REPO = Path(__file__).resolve().parents[3]
HAS_MOUNTINFO = os.path.exists("/proc/self/mountinfo")


def _problems(report) -> dict[str, str]:
    return {Path(p.path).name: p.name for p in report.problems}


def _audited(report) -> set[str]:
    return {Path(f.path).name for f in report.findings}


def _outside_and_inside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "elsewhere.py").write_text("x = 1\n")
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "away").symlink_to(outside)
    (root / "away.py").symlink_to(outside / "elsewhere.py")
    (root / "again").symlink_to(root / "pkg")  # inside: followed (its file listed once)
    return root


def test_links_out_of_the_root_are_named_and_not_followed(tmp_path):
    root = _outside_and_inside(tmp_path)
    found = tree_module.walk([root])
    assert [f.relpath for f in found.files] == ["again/mod.py"]  # once, by the first name
    names = {Path(p.path).name: (p.name, p.message) for p in found.problems}
    assert set(names) == {"away", "away.py"}
    assert names["away"][0] == names["away.py"][0] == "link-outside-root"
    assert str(tmp_path / "outside") in names["away"][1]
    report = run_audit([root], options=Options(jobs=1))
    assert report.exit_code == 2
    assert "PROBLEM link-outside-root" in report.to_text()


def test_two_paths_are_one_root(tmp_path):
    root = _outside_and_inside(tmp_path)
    found = tree_module.walk([root, tmp_path / "outside"])
    assert not found.problems  # a link into another PATH stays inside the audit
    assert sorted(Path(f.relpath).name for f in found.files) == ["elsewhere.py", "mod.py"]


def test_a_link_to_the_filesystem_root_is_bounded(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "rootlink").symlink_to("/")
    started = time.monotonic()
    found = tree_module.walk([root])
    assert time.monotonic() - started < 5
    assert found.files == []
    assert [(p.name, Path(p.path).name) for p in found.problems] == [
        ("link-outside-root", "rootlink")
    ]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "conformance.audit.cli", *args, "--no-cache", "--no-config"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not HAS_MOUNTINFO, reason="needs a Linux mount table")
def test_a_special_filesystem_as_path_is_refused_in_one_line():
    result = _cli("/proc/self")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "proc filesystem" in lines[0] and "'/proc/self'" in lines[0]


def test_a_special_filesystem_below_the_root_is_not_entered(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "sys").mkdir(parents=True)
    (root / "sys" / "generated.py").write_text("x = 1\n")
    (root / "src.py").write_text("x = 1\n")
    table = [(str(root / "sys"), "sysfs"), ("/", "ext4")]
    monkeypatch.setattr(tree_module, "Mounts", lambda: mounts_module.Mounts(table))
    real_stat = os.stat

    def stat(path, *args, **kwargs):  # a mount point: another device than its parent
        info = real_stat(path, *args, **kwargs)
        if os.fspath(path) == str(root / "sys"):
            fields = list(info[:10])
            fields[2] = info.st_dev + 1
            return os.stat_result(fields)
        return info

    monkeypatch.setattr(tree_module.os, "stat", stat)
    found = tree_module.walk([root])
    assert [f.relpath for f in found.files] == ["src.py"]
    assert [(p.name, Path(p.path).name) for p in found.problems] == [("special-filesystem", "sys")]
    assert "sysfs" in found.problems[0].message


def test_mount_table_parsing(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
        "23 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "24 23 0:5 / /my\\040dir rw - tmpfs tmpfs rw\n"
    )
    mounts = mounts_module.Mounts(mounts_module.mount_table(str(info)))
    assert mounts.special("/proc/1/root") == "proc"
    assert mounts.special("/processes") is None  # a prefix of the name is not the mount
    assert mounts.fs_type("/my dir/x") == "tmpfs"
    assert mounts_module.mount_table(str(tmp_path / "none")) == []


@pytest.mark.parametrize(("limit", "value"), [("files", 3), ("entries", 5), ("depth", 4)], ids=str)
def test_walk_limits_stop_the_walk_with_a_named_problem(tmp_path, monkeypatch, limit, value):
    root = tmp_path / "root"
    deep = root.joinpath(*[f"d{i}" for i in range(8)])
    deep.mkdir(parents=True)
    for i in range(6):
        (root / f"m{i}.py").write_text("x = 1\n")
    (deep / "deep.py").write_text("x = 1\n")
    monkeypatch.setattr(tree_module, "WALK_LIMITS", {**tree_module.WALK_LIMITS, limit: value})
    found = tree_module.walk([root])
    assert [p.name for p in found.problems] == ["walk-limit"]
    assert "not audited" in found.problems[0].message
    if limit == "files":
        assert len(found.files) == value
    report = run_audit([root], options=Options(jobs=1))
    assert report.exit_code == 2
