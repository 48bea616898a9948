"""Family A on SGLang: its own ForwardBatch, from the suite's batch sweep, through its backends."""

from __future__ import annotations

import pytest

from conformance.engines import checks
from conformance.engines.builder_verdict import judge_builder, judge_sweep
from conformance.engines.sglang.adapter import BACKENDS, MAX_CONTEXT_LEN, record_class
from conformance.engines.sglang.batch import KIND_SPECS, OPTIONAL_SET, batch_kind, forward_batch
from conformance.engines.target import engine_target
from conformance.metadata.batch import BATCH_SPECS, BatchSpec

MUST_BUILD = engine_target("sglang").must_build
POOL = 16  # requests the measurement's runners hold
SWEEP = [
    s
    for s in BATCH_SPECS.values()
    if max(s.seq_lens) <= MAX_CONTEXT_LEN and s.batch_size <= POOL and min(s.query_lens) > 0
]


def test_record_fields_come_from_the_installed_dataclass(facts) -> None:
    assert facts.record_fields == checks.record_fields(record_class())
    assert set(OPTIONAL_SET) <= set(facts.optional_fields), "an optional field is now required"


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_builder_builds(facts, name, record_property) -> None:
    judge_builder(name, facts.builders[name], MUST_BUILD, KIND_SPECS, record_property)


@pytest.mark.parametrize("name", MUST_BUILD)
def test_builder_builds_the_whole_sweep(run, name) -> None:
    backend = run.construct(name)

    def build(spec: BatchSpec) -> object:
        return run.build(backend, forward_batch(spec, run.runner(name)))

    judge_sweep(name, SWEEP, build, batch_kind)


def test_needed_fields_are_measured(facts) -> None:
    needed = facts.builders_needing("extend_seq_lens")
    assert needed, "no backend was seen to need extend_seq_lens"
    for name in ("triton", "aiter"):
        assert {"mixed", "prefill"} <= set(needed.get(name, ())), needed
        assert "decode" not in needed.get(name, ()), needed


@pytest.mark.negative_control
def test_forward_batch_without_extend_seq_lens_fails_naming_it(run, facts) -> None:
    """A mixed ForwardBatch missing a field the triton backend reads is caught, by name."""
    batch = forward_batch(KIND_SPECS["mixed"], run.runner("triton"), omit=("extend_seq_lens",))
    problems = checks.construction_problems(batch, "mixed", "triton", facts.fields)
    assert problems and "extend_seq_lens" in problems[0], problems
    assert not checks.attempt(lambda: run.build(run.construct("triton"), batch)).ok
