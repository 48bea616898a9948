"""The planner benchmark's case table, its planner calls and its text table (no GPU)."""

from __future__ import annotations

import types

import pytest
import torch

from benchmarks import bench_planner_cases as bpc
from benchmarks.decode import cases
from conformance.persistent import plan_persistent_decode

pytestmark = pytest.mark.selftest


def test_the_planner_table_is_the_decode_table_plus_many_requests() -> None:
    table = cases.PLANNER_TABLE
    assert set(cases.PEER_TABLE) < set(table)
    assert {(h, b) for h, _, b, _ in table if b == 1024} == {(16, 1024), (128, 1024)}


def test_a_case_is_planned_as_the_decode_benchmark_plans_it(monkeypatch) -> None:
    props = types.SimpleNamespace(multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _: props)
    call = bpc.planner_call(128, "fp8", 4, 1000)
    assert call["kv_indptr"].tolist() == [0, 16, 32, 48, 64]  # 16 pages of 64 a request
    assert call["kv_last_page_lens"].tolist() == [1000 - 15 * 64] * 4
    assert call["kv_dtype"] == torch.float8_e4m3fn and call["num_cus"] == 132
    assert plan_persistent_decode(**call).num_tiles == 8  # two head groups a request


def test_the_table_shows_rounds_and_leaves_out_a_step_not_timed() -> None:
    row = {
        "case": "h16-bf16-b128-L4096",
        "num_tiles": 128,
        "num_works": 128,
        "rounds": 0,
        "rounds_without_chain": 128,
        "planner_us": 5.75,
        "planner_rounds_only_us": 54.2,
    }
    text = bpc.format_table([row, {**row, "step_us": 166.2, "decode_alone_us": 159.5,
                                   "step_over_decode_us": 6.7}])  # fmt: skip
    lines = text.splitlines()
    assert "0/128" in lines[2] and lines[2].rstrip().endswith("-")
    assert "166.2" in lines[3] and lines[3].rstrip().endswith("6.7")
