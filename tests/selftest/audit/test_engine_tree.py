"""The engine-shaped tree: every true finding, no false one; the seeds; the CI recipe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conformance.audit import Options, run_audit

REPO = Path(__file__).resolve().parents[3]


def _found(report, root: Path) -> set[tuple[str, str, tuple[str, ...]]]:
    return {
        (Path(f.path).resolve().relative_to(root.resolve()).as_posix(), f.code, f.names)
        for f in report.findings
    }


def test_engine_tree_has_exactly_the_true_findings(tmp_path, engine):
    root = engine.write_engine_tree(tmp_path / "tree")
    report = run_audit([root], options=Options(jobs=1))
    assert not report.problems, report.to_text()
    assert _found(report, root) == engine.EXPECTED, report.to_text()
    assert report.exit_code == 1


def test_builder_reading_no_dim_judges_no_dim(tmp_path, engine):
    root = engine.write_engine_tree(tmp_path / "tree", dims=False)
    report = run_audit([root], options=Options(jobs=1))
    assert _found(report, root) == engine.EXPECTED_OLD, report.to_text()


def test_fixed_seeds_leave_only_the_other_findings(tmp_path, engine):
    root = engine.write_engine_tree(tmp_path / "tree", fixed=True)
    found = _found(run_audit([root], options=Options(jobs=1)), root)
    seeds = {e for e in engine.EXPECTED if e[0] in (engine.SEED_52139, engine.SEED_40844)}
    seeds = {e for e in seeds if e[1] in ("STUB001", "CAM001")}
    assert found == engine.EXPECTED - seeds


def test_parallel_run_equals_serial_run(tmp_path, engine):
    root = engine.write_engine_tree(tmp_path / "tree")
    for n in range(80):  # enough files for the process pool
        (root / "vllm" / f"filler_{n}.py").write_text(f"X = {n}\n")
    serial = run_audit([root], options=Options(jobs=1))
    parallel = run_audit([root], options=Options(jobs=2, cache_dir=str(tmp_path / "cache")))
    cached = run_audit([root], options=Options(jobs=2, cache_dir=str(tmp_path / "cache")))
    assert _found(serial, root) == _found(parallel, root) == _found(cached, root)
    assert any((tmp_path / "cache").rglob("*.json"))


def _ci(root: Path, *args: str) -> int:
    """The CI recipe of docs/audit.md, run as a subprocess from `root`."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(root / ".cache")}
    command = [sys.executable, "-m", "conformance", "audit", ".", *args]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True).returncode


def test_ci_recipe_adopts_with_a_baseline_and_fails_on_each_new_seed(tmp_path, engine):
    root = engine.write_engine_tree(tmp_path / "tree")
    assert _ci(root) == 1
    assert _ci(root, "--write-baseline", "audit-baseline.json") == 0
    assert _ci(root, "--baseline", "audit-baseline.json") == 0
    # A new regression of each seed's shape fails the adopted tree.
    seed_40844 = root / "benchmarks" / "attention_benchmarks" / "new_runner.py"
    shutil.copy(root / engine.SEED_40844, seed_40844)
    assert _ci(root, "--baseline", "audit-baseline.json") == 1
    seed_40844.unlink()
    sibling = root / "tests" / "kernels" / "attention" / "test_rocm_aiter_mla_new.py"
    shutil.copy(root / engine.SEED_52139, sibling)
    assert _ci(root, "--baseline", "audit-baseline.json") == 1
    sibling.unlink()
    assert _ci(root, "--baseline", "audit-baseline.json") == 0


def test_baseline_survives_moved_lines_but_not_a_second_copy(tmp_path, engine):
    root = engine.write_engine_tree(tmp_path / "tree")
    assert _ci(root, "--write-baseline", "b.json") == 0
    seed = root / engine.SEED_52139
    seed.write_text("\n\n# moved\n" + seed.read_text())
    assert _ci(root, "--baseline", "b.json") == 0
    document = json.loads((root / "b.json").read_text())
    assert {e["code"] for e in document["findings"]} >= {"STUB001", "CAM001", "CAM002"}
    # A second copy of the same stub in the same function is a new finding.
    text = seed.read_text()
    start = text.index("    vllm_config.compilation_config.static_forward_context[layer_name]")
    end = text.index("    return builder_cls(")
    seed.write_text(text[:end] + text[start:end] + text[end:])
    assert _ci(root, "--baseline", "b.json") == 1
    seed.write_text(text)
    assert _ci(root, "--baseline", "b.json") == 0
