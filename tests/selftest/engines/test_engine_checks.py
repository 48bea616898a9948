"""The engine checks on a fake engine: each passes on it and fails on its broken variant."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

from conformance.engines import checks
from conformance.engines.facts import FieldFacts
from conformance.errors import StubIncompleteError
from conformance.metadata.batch import BATCH_SPECS, make_cam
from conformance.stubs.recorder import record_layer

FAKE = runpy.run_path(str(Path(__file__).with_name("fake_engine.py")))
Record, Layer, MLABuilder = FAKE["FakeAttentionMetadata"], FAKE["Layer"], FAKE["MLABuilder"]
NAMES = ("layer.0", "layer.1")
KINDS = {"decode": "small_decode", "mixed": "mixed_small", "prefill": "extend"}


def record(kind: str, omit: tuple[str, ...] = (), cls: type = Record):
    return checks.to_engine_record(
        make_cam(BATCH_SPECS[KINDS[kind]], block_size=16), cls, omit=omit
    )


def layers(omit: tuple[str, ...] = ()) -> dict[str, object]:
    return {name: Layer(omit) for name in NAMES}


def test_record_fields_are_read_from_the_dataclass() -> None:
    assert "seq_lens_cpu_upper_bound" in checks.optional_fields(Record)
    assert "query_start_loc" in checks.required_fields(Record)
    assert isinstance(record("mixed"), Record)


def test_a_required_field_the_suite_lacks_is_named() -> None:
    with pytest.raises(checks.EngineRecordError, match="dspark_window"):
        record("decode", cls=FAKE["FakeAttentionMetadataWithNewField"])


def test_field_needs_finds_the_upper_bound_on_batches_with_prefill_rows() -> None:
    needs = checks.field_needs(
        lambda _b, rec: MLABuilder(layers()).build(0, rec),
        ["FAKE"],
        {kind: (lambda omit, k=kind: record(k, omit)) for kind in KINDS},
        checks.optional_fields(Record),
    )
    assert sorted(needs) == ["seq_lens_cpu_upper_bound"]
    assert sorted(needs["seq_lens_cpu_upper_bound"]) == ["FAKE/mixed", "FAKE/prefill"]
    assert "AssertionError" in needs["seq_lens_cpu_upper_bound"]["FAKE/mixed"]


def test_construction_without_the_upper_bound_on_a_mixed_batch_is_named() -> None:
    facts = {"seq_lens_cpu_upper_bound": FieldFacts(True, {"FAKE": ("mixed", "prefill")}, {})}
    without = record("mixed", ("seq_lens_cpu_upper_bound",))
    problems = checks.construction_problems(without, "mixed", "FAKE", facts)
    assert len(problems) == 1 and problems[0].startswith("seq_lens_cpu_upper_bound")
    assert checks.construction_problems(record("mixed"), "mixed", "FAKE", facts) == []
    assert checks.construction_problems(without, "decode", "FAKE", facts) == []


def test_a_transformation_dropping_a_field_is_named() -> None:
    healthy = record("mixed")
    assert checks.dropped_fields(healthy, healthy.unpadded(healthy.num_actual_tokens, 4)) == ()
    broken = record("mixed")
    broken.broken_unpadded = True
    dropped = checks.dropped_fields(broken, broken.unpadded(broken.num_actual_tokens, 4))
    assert dropped == ("seq_lens_cpu_upper_bound",)


def test_recorded_reads_and_leave_one_out_find_the_dims() -> None:
    reads = checks.record_reads(
        lambda ls: MLABuilder(ls), lambda b: b.build(0, record("mixed")), Layer, NAMES
    )
    assert {*FAKE["DIMS"], "prefill_backend", "prefill_backend.clone"} <= reads.first["init"]
    assert "non_causal" in reads.missing
    required, every = checks.leave_one_out(
        lambda ls: MLABuilder(ls).build(0, record("decode")),
        lambda omit=(): Layer(omit),
        NAMES,
        checks.top_level(reads.first["init"]),
    )
    assert sorted(required) == sorted([*FAKE["DIMS"], "prefill_backend"])
    assert every == ()


def test_leave_one_out_sees_reads_of_every_layer() -> None:
    _, every = checks.leave_one_out(
        lambda ls: MLABuilder(ls, broken_reads_every_layer=True),
        lambda omit=(): Layer(omit),
        NAMES,
        ["kv_lora_rank", "q_lora_rank"],
    )
    assert every == ("kv_lora_rank",)


def test_a_stub_without_q_lora_rank_fails_naming_it() -> None:
    stubs = {n: record_layer(Layer(("q_lora_rank",)), name=n) for n in NAMES}
    with pytest.raises(StubIncompleteError, match="q_lora_rank"):
        MLABuilder(stubs)


def test_a_planner_call_without_the_fp8_dtypes_is_named() -> None:
    fp8 = torch.float8_e4m3fnuz
    healthy = MLABuilder(layers())
    healthy.build(0, record("decode"))
    assert checks.planner_dtype_problems(healthy.planner.calls[-1], fp8, fp8) == []
    broken = MLABuilder(layers(), broken_planner_dtypes=True)
    broken.build(0, record("decode"))
    problems = checks.planner_dtype_problems(broken.planner.calls[-1], fp8, fp8)
    assert [p.split(" ")[2] for p in problems] == ["dtype_q", "dtype_kv"]


def test_an_engine_error_is_one_line_naming_a_bare_assert() -> None:
    def bare() -> None:
        raise AssertionError

    outcome = checks.attempt(bare)
    assert not outcome.ok and "(no message) at test_engine_checks.py:" in outcome.error
