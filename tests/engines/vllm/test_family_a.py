"""Family A on vLLM: its own record, from the suite's batch sweep, through its own builders."""

from __future__ import annotations

import pytest

from conformance.engines import checks
from conformance.engines.builder_verdict import judge_builder, judge_sweep
from conformance.engines.vllm.adapter import BUILDERS, MAX_MODEL_LEN, MUST_BUILD
from conformance.engines.vllm.measure import KIND_SPECS, batch_kind
from conformance.metadata import validate
from conformance.metadata.batch import BATCH_SPECS

SWEEP = [s for s in BATCH_SPECS.values() if max(s.seq_lens) <= MAX_MODEL_LEN]
# Differences found and reported, not judged by this sweep (docs/engines.md, "Findings").
REPORTED = {
    ("ROCM_AITER_MLA", "padded_decode"): "vLLM plans CUDA-graph padding rows (seq_len 0) "
    "as one q token each; the suite's reference planner refuses kv length < q length",
}


def test_record_fields_come_from_the_installed_dataclass(facts) -> None:
    from vllm.v1.attention.backend import CommonAttentionMetadata

    assert facts.record_fields == checks.record_fields(CommonAttentionMetadata)
    assert "seq_lens_cpu_upper_bound" in facts.optional_fields


@pytest.mark.parametrize("spec", SWEEP, ids=lambda s: s.name)
def test_suite_validator_accepts_vllm_records(measurement, spec) -> None:
    engine = measurement.engine("TRITON_MLA")
    validate(checks.ValidatorView(engine.record(spec)), block_size=engine.block_size)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_builder_builds(facts, name, record_property) -> None:
    judge_builder(name, facts.builders[name], MUST_BUILD, KIND_SPECS, record_property)


@pytest.mark.parametrize("name", MUST_BUILD)
def test_builder_builds_the_whole_sweep(measurement, name, record_property) -> None:
    engine = measurement.engine(name)
    built = measurement.construct(name)
    judged = []
    for spec in SWEEP:
        if (name, spec.name) in REPORTED:
            record_property(f"reported:{spec.name}", REPORTED[name, spec.name])
        else:
            judged.append(spec)
    judge_sweep(name, judged, lambda spec: engine.build(built, engine.record(spec)), batch_kind)


def test_needed_fields_are_measured(facts) -> None:
    needed = facts.builders_needing("seq_lens_cpu_upper_bound")
    assert needed, "no builder was seen to need seq_lens_cpu_upper_bound"
    for builder in MUST_BUILD:
        assert "mixed" in needed.get(builder, ()), needed
        assert "decode" not in needed.get(builder, ()), needed


@pytest.mark.parametrize(
    "transform", ["unpadded", "replace", "ubatch_slice", "extend_all_queries_by_N"]
)
def test_transformation_keeps_every_needed_field(facts, transform, record_property) -> None:
    result = facts.transformations[transform]
    record_property("dropped", ",".join(result.dropped))
    if not result.ran:
        pytest.skip(f"{transform}: {result.reason}")
    needed = {name for name, f in facts.fields.items() if f.needed_by}
    lost = sorted(needed & set(result.dropped))
    assert not lost, f"{transform} drops {lost}, which real builders need"


@pytest.mark.negative_control
def test_construction_without_upper_bound_fails_on_mixed(measurement, facts) -> None:
    """A mixed-batch record without seq_lens_cpu_upper_bound (#40844) is caught, by name."""
    engine = measurement.engine("TRITON_MLA")
    record = engine.record(KIND_SPECS["mixed"], omit=("seq_lens_cpu_upper_bound",))
    problems = checks.construction_problems(record, "mixed", "TRITON_MLA", facts.fields)
    assert problems and "seq_lens_cpu_upper_bound" in problems[0], problems
    built = measurement.construct("TRITON_MLA")
    assert not checks.attempt(lambda: engine.build(built, record)).ok
