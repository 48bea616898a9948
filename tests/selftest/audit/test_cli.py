"""Self-tests of the audit command line (`conformance.audit.cli`): output, JSON, exit codes.

Most tests call `cli.main` in-process; two run ``python -m conformance.audit.cli`` in a
subprocess to pin the real exit status and the as-given path display.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.audit import cli

REPO_ROOT = Path(__file__).resolve().parents[2]

BENCHMARK_40844 = """\
from vllm.v1.attention.backend import CommonAttentionMetadata


def _build_attention_metadata(t, n):
    return CommonAttentionMetadata(
        query_start_loc=t, query_start_loc_cpu=t, seq_lens=t, num_reqs=n,
        num_actual_tokens=n, max_query_len=n, max_seq_len=n, block_table_tensor=t,
        slot_mapping=t,
    )
"""
BENCHMARK_FIXED = BENCHMARK_40844.replace(
    "slot_mapping=t,", "slot_mapping=t, seq_lens_cpu_upper_bound=t,"
)
STUB_52139 = """\
import types

import torch


def _build_decode_metadata(vllm_config, layer_name):
    vllm_config.compilation_config.static_forward_context[layer_name] = (
        types.SimpleNamespace(prefill_backend=torch.empty((1,)))
    )
"""
STUB_FIXED = STUB_52139.replace(
    "prefill_backend=torch.empty((1,))",
    "prefill_backend=torch.empty((1,)), q_lora_rank=1, kv_lora_rank=2, qk_nope_head_dim=3,"
    " qk_rope_head_dim=4, v_head_dim=5",
)
PROTOCOL_FILE = """\
# the MLA builder's layer protocol (vLLM after #51255)
[rocm]
prefill_backend
prefill_backend.clone
q_lora_rank
kv_lora_rank
qk_nope_head_dim
qk_rope_head_dim
v_head_dim
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path → source) under `root`; return `root`."""
    for relpath, source in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


def run_main(*argv: str) -> int:
    """`cli.main` on `argv`, as ``python -m conformance audit`` would call it."""
    return cli.main(cli.build_parser().parse_args(list(argv)))


@pytest.fixture
def broken_tree(tmp_path: Path) -> Path:
    """A tree with the #40844 benchmark and the #52139 stub."""
    return write_tree(
        tmp_path / "tree",
        {
            "benchmarks/mla_runner.py": BENCHMARK_40844,
            "tests/test_rocm_aiter_mla_decode_metadata.py": STUB_52139,
        },
    )


def test_findings_exit_1_with_path_line_code_lines(broken_tree, capsys):
    assert run_main(str(broken_tree)) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert f"{broken_tree}/benchmarks/mla_runner.py:5: CAM001 " in out
    stub_line = next(line for line in lines if "STUB001" in line)
    assert stub_line.startswith(f"{broken_tree}/tests/test_rocm_aiter_mla_decode_metadata.py:8: ")
    assert "q_lora_rank" in stub_line
    assert "exit 1" in err


def test_warnings_alone_exit_0(tmp_path, capsys):
    write_tree(tmp_path, {"bench.py": BENCHMARK_FIXED, "test_stub.py": STUB_FIXED})
    assert run_main(str(tmp_path)) == 0
    out, _ = capsys.readouterr()
    assert [line.split(": ")[1].split()[0] for line in out.splitlines()] == ["STUB003"]


def test_json_document_carries_findings_errors_and_provenance(broken_tree, capsys):
    (broken_tree / "broken.py").write_text("x = (\n")
    assert run_main(str(broken_tree), "--json") == 2
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 2
    assert document["audits"] == ["construction", "stubs"]
    (error,) = document["errors"]
    assert set(error) == {"path", "line", "col", "message"}
    assert (error["path"], error["line"]) == (f"{broken_tree}/broken.py", 1)
    assert error["message"]
    by_code = {f["code"]: f for f in document["findings"]}
    assert set(by_code) == {"CAM001", "STUB001", "STUB003"}
    cam = by_code["CAM001"]
    assert set(cam) >= {"path", "line", "col", "kind", "code", "message", "names"}
    assert (cam["kind"], cam["names"], cam["line"]) == ("missing", ["seq_lens_cpu_upper_bound"], 5)
    assert "seq_lens_cpu_upper_bound" in document["definition"]["needed"]
    assert document["protocol"]["source"] == "backends.registry.layer_protocols()"


def test_protocol_file_replaces_the_default(broken_tree, tmp_path, capsys):
    protocol = tmp_path / "protocol.txt"
    protocol.write_text("[cpu]\nprefill_backend\n")
    assert run_main(str(broken_tree), "--only", "stubs", "--protocol", str(protocol)) == 0
    out, _ = capsys.readouterr()
    assert "STUB001" not in out and "CAM001" not in out


def test_bad_protocol_file_exits_2_naming_file_and_line(broken_tree, tmp_path, capsys):
    protocol = tmp_path / "protocol.txt"
    protocol.write_text("prefill_backend\nq-lora-rank\n")
    assert run_main(str(broken_tree), "--protocol", str(protocol)) == 2
    assert f"{protocol}:2: bad attribute path 'q-lora-rank'" in capsys.readouterr().err


def test_missing_path_exits_2(tmp_path, capsys):
    assert run_main(str(tmp_path / "nowhere")) == 2
    assert "nowhere" in capsys.readouterr().err


def test_only_construction_skips_stubs(broken_tree, capsys):
    assert run_main(str(broken_tree), "--only", "construction") == 1
    out = capsys.readouterr().out
    assert "CAM001" in out and "STUB" not in out


def test_usage_error_exits_2():
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args([])
    assert exc.value.code == 2


# ---------------------------------------------------------------------------- subprocess


def run_module(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m conformance.audit.cli ARGV`` from `cwd`, this repository importable."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "conformance.audit.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_subprocess_parse_error_exits_2_and_still_reports_the_rest(broken_tree, tmp_path):
    (broken_tree / "pkg").mkdir()
    (broken_tree / "pkg/broken.py").write_text("def f(:\n    pass\n")
    protocol = write_tree(tmp_path, {"p.txt": PROTOCOL_FILE}) / "p.txt"
    result = run_module(broken_tree, ".", "--protocol", str(protocol))
    assert result.returncode == 2, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("pkg/broken.py:1: PARSE ")
    assert any(line.startswith("benchmarks/mla_runner.py:5: CAM001 ") for line in lines)
    assert any(
        line.startswith("tests/test_rocm_aiter_mla_decode_metadata.py:8: STUB001 ")
        for line in lines
    )


def test_subprocess_clean_tree_exits_0(tmp_path):
    tree = write_tree(tmp_path / "tree", {"bench.py": BENCHMARK_FIXED})
    protocol = write_tree(tmp_path, {"p.txt": PROTOCOL_FILE}) / "p.txt"
    result = run_module(tmp_path, "tree", "--protocol", str(protocol), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert (document["findings"], document["errors"]) == ([], [])
    assert document["files_audited"] == 1
    assert tree.is_dir()
