"""Self-tests of the decode benchmark's CPU-side paths: command line, grid, output check, report.

Timing needs CUDA; everything around it is checked here: without CUDA the benchmark says so
and exits 0, bad ``--impls`` are named, the quick grid is the side-by-side table, the output
check marks NaN / far-off results wrong (and passes close ones), and the markdown shows
ours ÷ peer, bold when ours is slower, WRONG (with the reason listed) when a check failed.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import torch

from benchmarks import bench_decode
from benchmarks.decode import cases, report
from benchmarks.decode.record import WRONG_FRACTION, wrong_reason


def test_without_cuda_it_says_so_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_decode.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "needs a CUDA device" in out and "nothing was run" in out


def test_the_recorded_command_names_no_output_path() -> None:
    # The results files are committed: the output folder is recorded as OUT, in both forms.
    assert bench_decode._command(["--out", "/scratch/run1", "--quick"]) == (
        "python -m benchmarks.bench_decode --out OUT --quick"
    )
    assert bench_decode._command(["--out=/scratch/run1"]) == (
        "python -m benchmarks.bench_decode --out=OUT"
    )


def test_unknown_impl_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_decode.main(["--impls", "triton,flashinfer_fa4"])
    assert exc.value.code == 2
    assert "flashinfer_fa4" in capsys.readouterr().err


def test_quick_grid_is_the_side_by_side_table_at_q_len_1() -> None:
    grid = cases.quick_grid()
    table = {(c.heads, c.kv_format, c.batch, c.context) for c in grid if c.q_len == 1}
    assert table == set(cases.PEER_TABLE) and len(cases.PEER_TABLE) == 14
    assert set(grid) <= set(cases.full_grid())


def _result(err: float, nan: bool = False, **extra: float) -> dict[str, Any]:
    return {"max_abs_err": err, "nan_anywhere": nan, **extra}


def test_output_check_passes_close_results_and_marks_far_or_nan_ones() -> None:
    ref = 0.004
    assert wrong_reason(_result(0.1 * ref), ref) is None
    assert "fp32 reference" in wrong_reason(_result(1.01 * WRONG_FRACTION * ref), ref)
    assert "NaN" in wrong_reason(_result(0.0, nan=True), ref)
    assert "from ours" in wrong_reason(_result(0.0, max_diff_vs_ours=ref), ref)
    assert "fp32 reference" in wrong_reason(_result(float("nan")), ref)


def _entry(us: float, **extra: Any) -> dict[str, Any]:
    return {"us": us, "fraction_of_floor": 100.0 / us, "max_abs_err": 1e-5, **extra}


def _payload() -> dict[str, Any]:
    floor = {"us": 100.0, "bound": "memory"}
    faster = {"case": "h16-bf16-b128-L4096-s1", "floor": floor, "triton": _entry(110.0)}
    faster |= {"flashmla": _entry(100.0), "ours_over_flashmla": 1.1}
    faster |= {"flashinfer_fa3": _entry(121.0), "ours_over_flashinfer_fa3": 110.0 / 121.0}
    faster |= {"ours_over_fastest_peer": 1.1}
    faster |= {"flashinfer_fa2": {"skipped": "RuntimeError: not on this device"}}
    slower = {"case": "h128-bf16-b128-L8192-s1", "floor": floor, "triton": _entry(274.0)}
    slower |= {"flashinfer_fa3": _entry(100.0), "ours_over_flashinfer_fa3": 2.74}
    slower |= {"baseline": _entry(300.0, wrong="max error 1e-2 vs the fp32 reference > 1e-3")}
    fp8 = {"case": "h16-fp8-b128-L4096-s1", "floor": floor, "triton": _entry(200.0)}
    fp8 |= {"floor_fp8_rate": {"us": 80.0, "bound": "memory"}}
    fp8["triton"]["fraction_of_fp8_rate_floor"] = 0.4
    return {
        "date": "2026-12-01",
        "command": "python -m benchmarks.bench_decode --quick",
        "environment": {"gpu": "NVIDIA H200", "torch": "2.11"},
        "ceilings": {
            "copy_bytes_per_s": 4.27e12,
            "matmul_flops_per_s": 679e12,
            "ridge_flops_per_byte": 159.0,
        },
        "flashinfer": {"available": True, "version": "0.7.4", "warm_up": {"fa3-bf16": "ok"}},
        "timing": "CUDA graph replay",
        "cases": [
            faster,
            slower,
            fp8,
            {"case": "h16-fp8-b1-L1024-s1", "skipped": "out of memory"},
        ],
    }


def test_markdown_gives_ratios_bold_when_slower_and_wrong_ones_listed() -> None:
    text = report.markdown(_payload())
    assert "copy 4.27 TB/s" in text and "bf16 matmul 679 TFLOP/s" in text
    assert "FlashInfer 0.7.4" in text
    rows: dict[str, str] = {}  # the comparison table's row of each case (the first one)
    for line in text.splitlines():
        if line.startswith("| h"):
            rows.setdefault(line.split(" | ")[0][2:], line)
    assert (
        "| 110.0 (90.9 %) | 100.0 (100.0 %) | **1.10** | 121.0 (82.6 %) | 0.91 | skipped | – |"
        in rows["h16-bf16-b128-L4096-s1"]
    )
    assert rows["h16-bf16-b128-L4096-s1"].endswith("| **1.10** | – |")  # ÷ min(FlashMLA, fa3)
    assert rows["h16-fp8-b128-L4096-s1"].endswith("| – | 80.0 (memory; ours 40.0 %) |")
    assert "FlashMLA not timed: not requested" in text
    assert "| **2.74** |" in rows["h128-bf16-b128-L8192-s1"]
    assert "300.0 (33.3 %) WRONG | WRONG |" in rows["h128-bf16-b128-L8192-s1"]
    assert "- h128-bf16-b128-L8192-s1: baseline wrong: max error" in text
    assert "- h16-bf16-b128-L4096-s1: flashinfer_fa2 skipped: RuntimeError" in text
    assert "skipped: out of memory" in text


def test_markdown_says_why_flashinfer_was_not_timed() -> None:
    payload = _payload() | {"flashinfer": {"available": False, "reason": "no module"}}
    assert "FlashInfer not timed: no module" in report.markdown(payload)


def test_write_reports_names_files_by_date_and_gpu(tmp_path: Any) -> None:
    json_path, md_path = report.write_reports(report.report_paths(tmp_path, _payload()), _payload())
    assert json_path.name == "2026-12-01-h200.json" and md_path.name == "2026-12-01-h200.md"
    assert '"ours_over_flashinfer_fa3": 2.74' in json_path.read_text()


def test_a_new_run_never_overwrites_an_earlier_runs_results(tmp_path: Any) -> None:
    first = report.report_paths(tmp_path, _payload())
    report.write_reports(first, _payload())
    earlier = first[1].read_text()
    second = report.report_paths(tmp_path, _payload())
    assert [p.name for p in second] == ["2026-12-01-h200-2.json", "2026-12-01-h200-2.md"]
    report.write_reports(second, _payload() | {"date": "2026-12-02"})
    report.write_reports(second, _payload() | {"date": "2026-12-03"})  # the run's own: replaced
    assert first[1].read_text() == earlier
    assert "2026-12-03" in second[1].read_text()
    (tmp_path / "2026-12-01-h200-3.md").write_text("a third run's markdown alone")
    assert report.report_paths(tmp_path, _payload())[0].name == "2026-12-01-h200-4.json"


def test_markdown_names_cases_whose_ours_ran_over_another_plan() -> None:
    payload = _payload()
    tuned = payload["cases"][1]
    tuned["plan"] = {"planned_heads": 64}
    tuned["triton_folded_plan"] = _entry(300.0)
    text = report.markdown(payload)
    assert "Plans other than the backend's:" in text
    assert (
        "- h128-bf16-b128-L8192-s1: ours over a plan for 64 heads, run once per head group; "
        "over the backend's plan (all heads, folded): 300.0 µs" in text
    )
    assert "Plans other than" not in report.markdown(_payload())


def test_the_kernel_digest_covers_every_kernel_source(tmp_path: Any, monkeypatch) -> None:
    # A Gluon kernel edited, a shared part added: what was timed is told apart either way.
    (tmp_path / "gluon_mla").mkdir()
    (tmp_path / "triton_mla").mkdir()
    (tmp_path / "triton_mla" / "launch.py").write_text("a = 1\n")
    (tmp_path / "gluon_mla" / "ws_kernel.py").write_text("b = 1\n")
    monkeypatch.setattr(report, "KERNEL_DIR", tmp_path)
    before = report.kernel_digest()
    (tmp_path / "gluon_mla" / "ws_kernel.py").write_text("b = 2\n")
    edited = report.kernel_digest()
    (tmp_path / "plan_slice.py").write_text("c = 1\n")
    assert len({before, edited, report.kernel_digest()}) == 3


def test_git_head_says_when_the_timed_files_differ_from_the_commit(tmp_path: Any) -> None:
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "kernel.py").write_text("a = 1\n")
    subprocess.run([*git, "add", "kernel.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "kernel"], check=True)
    head = report.git_head(tmp_path)
    assert len(head) >= 7 and not head.endswith("+modified")
    (tmp_path / "kernel.py").write_text("a = 2\n")  # a copy whose git metadata is stale
    assert report.git_head(tmp_path) == head + "+modified"
    assert report.git_head(tmp_path / "missing") == "unavailable"
