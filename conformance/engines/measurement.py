"""What every engine's measurement shares: its facts, assembled from one measurement run.

An engine driver's run (`conformance.engines.vllm.measure.Measurement`,
`conformance.engines.sglang.measure.Measurement`) measures each builder, the record's
optional fields on the builders that built, the record's transformations and what else the
engine's provenance carries; `engine_facts` puts them together with the record's own facts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from conformance.engines.checks import record_facts
from conformance.engines.facts import BuilderFacts, EngineFacts, FieldFacts, TransformFacts


class EngineMeasurement(Protocol):
    """One measurement run of an engine's own code."""

    def builder_facts(self, name: str) -> BuilderFacts:
        """What builder `name` was seen to read and need (its status: built or why not)."""
        ...

    def field_facts(self, built: list[str]) -> dict[str, FieldFacts]:
        """The record's optional fields, measured on the builders that built."""
        ...

    def transformation_facts(self) -> Mapping[str, TransformFacts]:
        """The record's transformations and the fields each drops (none: empty)."""
        ...

    def provenance(self, built: list[str]) -> Mapping[str, Any]:
        """What else the facts file's provenance carries."""
        ...


def engine_facts(
    run: EngineMeasurement,
    names: Iterable[str],
    *,
    engine: str,
    version: str,
    record_class: Callable[[], type],
) -> EngineFacts:
    """The facts of `engine` at `version` that `run` measures over the builders `names`;
    the provenance names the builders that built (``builders_built``)."""
    builders = {name: run.builder_facts(name) for name in names}
    built = [name for name, facts in builders.items() if facts.status == "built"]
    return EngineFacts(
        engine=engine,
        version=version,
        **record_facts(record_class()),
        builders=builders,
        fields=run.field_facts(built),
        transformations=run.transformation_facts(),
        provenance={"builders_built": built, **run.provenance(built)},
    )
