"""The engine tests' verdicts on a builder (`conformance.engines.builder_verdict`), on facts
and builds made up here: a builder the target must build fails unless built on every batch
kind, another that did not build skips, and a sweep names each batch that did not build."""

from __future__ import annotations

import pytest

from conformance.engines.builder_verdict import judge_builder, judge_sweep
from conformance.engines.facts import BuilderFacts
from conformance.metadata.batch import BatchSpec

KINDS = ("decode", "mixed")
BUILT = BuilderFacts(cls="pkg.ABuilder", batch_kinds=KINDS)
FAILED = BuilderFacts(cls="pkg.ABuilder", status="failed", reason="TypeError: no scale")
DECODE_ONLY = BuilderFacts(cls="pkg.ABuilder", batch_kinds=("decode",), reason="mixed: boom")


def _judge(builder: BuilderFacts, must_build: tuple[str, ...]) -> dict[str, object]:
    recorded: dict[str, object] = {}
    judge_builder("A", builder, must_build, KINDS, recorded.__setitem__)
    return recorded


def test_a_builder_built_on_every_kind_passes_and_is_recorded() -> None:
    assert _judge(BUILT, ("A",)) == {
        "builder_status": "built",
        "builder_class": "pkg.ABuilder",
        "batch_kinds": "decode,mixed",
    }


@pytest.mark.parametrize("builder", [FAILED, DECODE_ONLY], ids=["failed", "decode-only"])
def test_a_builder_the_target_must_build_fails_naming_why(builder: BuilderFacts) -> None:
    with pytest.raises(AssertionError, match=f"A: {builder.reason}"):
        _judge(builder, ("A",))


def test_another_builder_that_did_not_build_skips_saying_why() -> None:
    with pytest.raises(pytest.skip.Exception, match="A failed only: TypeError: no scale"):
        _judge(FAILED, ("B",))
    assert _judge(DECODE_ONLY, ("B",))["batch_kinds"] == "decode"


def test_a_sweep_names_every_batch_that_did_not_build() -> None:
    specs = [BatchSpec((4,), (1,), "one"), BatchSpec((4,), (2,), "two"), BatchSpec((4,), (3,), "x")]

    def build(spec: BatchSpec) -> None:
        if spec.query_lens[0] > 1:
            raise ValueError(f"{spec.name} refused")

    judge_sweep("A", specs[:1], build, lambda spec: "decode")
    with pytest.raises(AssertionError) as failed:
        judge_sweep("A", specs, build, lambda spec: "mixed")
    assert str(failed.value) == (
        "A failed on: ['two (mixed): ValueError: two refused', 'x (mixed): ValueError: x refused']"
    )
