"""The audit command line: text, JSON and SARIF output, exit codes, a bare interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conformance.audit import RULES
from conformance.audit.sites import VLLM

REPO = Path(__file__).resolve().parents[3]


def test_text_lines_and_summary(tmp_path, engine, run_cli):
    root = engine.write_engine_tree(tmp_path / "tree")
    status, out, err = run_cli(str(root))
    assert status == 1
    line = next(x for x in out.splitlines() if "STUB001" in x and "decode_metadata" in x)
    assert line.startswith(
        f"{root}/{engine.SEED_52139}:12: STUB001 layer stub SimpleNamespace(...)"
    )
    assert err.startswith("audit: 4 errors, 3 warnings, 4 info, 0 problems, ")


def test_json_document_follows_the_documented_schema(tmp_path, engine, run_cli):
    root = engine.write_engine_tree(tmp_path / "tree")
    status, out, _ = run_cli(str(root), "--json")
    document = json.loads(out)
    assert status == document["exit_code"] == 1
    assert document["version"] == 2 and document["fail_on"] == "error"
    assert set(document) >= {"findings", "problems", "definition", "consumers", "stubs", "config"}
    finding = document["findings"][0]
    assert set(finding) == {
        "path",
        "line",
        "col",
        "code",
        "severity",
        "message",
        "names",
        "qualname",
        "fingerprint",
    }
    assert document["stubs"]["judged"] == 5 and document["stubs"]["protocol"] is None


def test_sarif_log_is_2_1_0_with_rules_results_and_notifications(tmp_path, engine, run_cli):
    root = engine.write_engine_tree(tmp_path / "tree")
    os.mkfifo(root / "pipe.py")
    status, out, _ = run_cli(str(root), "--format", "sarif")
    log = json.loads(out)
    assert status == 2 and log["version"] == "2.1.0" and "sarif-2.1.0" in log["$schema"]
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(VLLM.rules) == [c for c in RULES if c != "STUB005"]
    summaries = {r["id"]: r["shortDescription"]["text"] for r in rules}
    assert "CommonAttentionMetadata" in summaries["CAM005"]
    assert "AttentionLayerBase" in summaries["STUB003"]
    levels = {r["level"] for r in run["results"]}
    assert levels == {"error", "warning", "note"}
    result = run["results"][0]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
    [note] = run["invocations"][0]["toolExecutionNotifications"]
    assert note["descriptor"]["id"] == "not-a-regular-file"
    assert run["invocations"][0]["executionSuccessful"] is False


def test_only_and_protocol_file(tmp_path, engine, run_cli):
    root = engine.write_engine_tree(tmp_path / "tree")
    status, out, _ = run_cli(str(root), "--only", "construction")
    assert "STUB" not in out and "CAM001" in out
    proto = tmp_path / "p.txt"
    proto.write_text("[rocm]\nscale\n")
    status, out, _ = run_cli(str(root), "--only", "stubs", "--protocol", str(proto))
    assert "lacks scale" in out and status == 1
    proto.write_text("[rocm]\nq lora\n")
    status, _, err = run_cli(str(root), "--protocol", str(proto))
    assert status == 2 and "p.txt:2: bad attribute path" in err


def test_usage_errors_exit_2(tmp_path, run_cli):
    status, _, err = run_cli(str(tmp_path / "missing"))
    assert status == 2 and "no such file or directory" in err
    status, _, err = run_cli(str(tmp_path), "--baseline", str(tmp_path / "none.json"))
    assert status == 2 and "no such file" in err
    result = subprocess.run(
        [sys.executable, "-m", "conformance.audit.cli", "--format", "xml", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2


def test_bare_interpreter_runs_the_audit_without_torch(tmp_path, engine):
    """``-S``: no site-packages, so no torch can be imported; paths print as given."""
    engine.write_engine_tree(tmp_path / "tree")
    code = (
        "import sys, conformance.audit.cli as c; r = c.run(sys.argv[1:]); "
        "assert 'torch' not in sys.modules; sys.exit(r)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-S", "-c", code, "tree", "--no-cache", "--no-config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stderr
    assert f"tree/{engine.SEED_52139}:12: STUB001" in result.stdout


def test_this_repository_is_clean_from_the_command_line():
    env = {**os.environ, "XDG_CACHE_HOME": "/nonexistent-cache"}
    result = subprocess.run(
        [sys.executable, "-m", "conformance", "audit", "."],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
