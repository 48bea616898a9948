"""Family B on vLLM: the layer reads of its real builders, recorded, are the protocol."""

from __future__ import annotations

import pytest

from conformance.engines import checks
from conformance.engines.vllm.adapter import LAYER_NAMES, MUST_BUILD
from conformance.errors import StubIncompleteError
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL
from conformance.stubs.recorder import record_layer


@pytest.mark.parametrize("name", MUST_BUILD)
def test_required_reads_are_in_the_suite_protocol(facts, name, record_property) -> None:
    builder = facts.builders[name]
    record_property("reads", ",".join(sorted(builder.read_set())))
    assert builder.required, f"{name}: leave-one-out found nothing required"
    stale = sorted(set(builder.required) - {p.split(".")[0] for p in MLA_BUILDER_LAYER_PROTOCOL})
    assert not stale, f"{name} needs {stale}, which the suite's layer protocol does not declare"
    unread = sorted(MLA_BUILDER_LAYER_PROTOCOL - builder.read_set())
    assert not unread, f"the suite's protocol declares {unread}; {name} never reads them"


@pytest.mark.negative_control
def test_stub_without_q_lora_rank_fails_naming_it(measurement) -> None:
    """A layer stub lacking q_lora_rank (#52139) fails the real builder, by name."""
    engine = measurement.engine("TRITON_MLA")
    layers = {
        name: record_layer(engine.make_layer(omit=("q_lora_rank",)), name=name)
        for name in LAYER_NAMES
    }
    with pytest.raises(StubIncompleteError, match="q_lora_rank"):
        engine.construct("TRITON_MLA", layers)


def test_recorded_reads_cover_leave_one_out(facts) -> None:
    for name in MUST_BUILD:
        builder = facts.builders[name]
        assert set(builder.required) <= set(checks.top_level(builder.read_set())), name
