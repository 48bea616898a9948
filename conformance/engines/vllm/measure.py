"""Measure vLLM's facts: which builders build, what they read and need, what transforms drop.

`measure(workdir)` drives the installed vLLM (`adapter`) with the suite's batch sweep and
recorder and returns `EngineFacts` (`conformance.engines.facts`); ``python -m
conformance.engines.vllm.measure OUT`` writes them as a facts file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance.engines import checks
from conformance.engines.facts import (
    BuilderFacts,
    EngineFacts,
    FieldFacts,
    TransformFacts,
    optional_field_facts,
    write_facts,
)
from conformance.engines.measurement import engine_facts
from conformance.engines.vllm.adapter import (
    BUILDERS,
    LAYER_NAMES,
    VllmEngine,
    backend_class,
    record_class,
    write_model_config,
)
from conformance.metadata.batch import BATCH_SPECS, BatchSpec

# One batch of each kind (decode threshold 1), decode rows first as vLLM reorders them.
KIND_SPECS: dict[str, BatchSpec] = {
    "decode": BATCH_SPECS["small_decode"],
    "mixed": BATCH_SPECS["mixed_small"],
    "prefill": BATCH_SPECS["extend"],
}
NOT_COMPILED = ("_flashmla_C", "not compiled", "_C is not available")


def batch_kind(spec: BatchSpec, threshold: int = 1) -> str:
    """decode (every row a decode), prefill (none) or mixed."""
    decodes = [q <= threshold for q in spec.query_lens]
    return "decode" if all(decodes) else "prefill" if not any(decodes) else "mixed"


class Measurement:
    """The engines of each cache configuration, made once, and what was measured on them."""

    def __init__(self, workdir: Path) -> None:
        self.model_dir = workdir / "model"
        write_model_config(self.model_dir)
        self._engines: dict[tuple[str, int], VllmEngine] = {}

    def engine(self, builder: str) -> VllmEngine:
        target = BUILDERS[builder]
        key = (target.cache_dtype, target.page_size)
        if key not in self._engines:
            self._engines[key] = VllmEngine(
                self.model_dir, cache_dtype=target.cache_dtype, block_size=target.page_size
            )
        return self._engines[key]

    def construct(self, builder: str, layers: dict[str, Any] | None = None) -> Any:
        engine = self.engine(builder)
        return engine.construct(builder, layers if layers is not None else engine.layers())

    def build(self, builder: str, record: Any, layers: dict[str, Any] | None = None) -> Any:
        return self.engine(builder).build(self.construct(builder, layers), record)

    def records(self, builder: str) -> dict[str, Callable[..., Any]]:
        engine = self.engine(builder)
        return {
            kind: (lambda omit, s=spec: engine.record(s, omit=omit))
            for kind, spec in KIND_SPECS.items()
        }

    # -- per builder --------------------------------------------------------------------

    def builder_facts(self, builder: str) -> BuilderFacts:
        try:
            cls = backend_class(builder).get_builder_cls()
        except Exception as error:  # an engine module that does not import is a finding
            return BuilderFacts(cls="", status="not-run", reason=checks.one_line(error))
        name, bases = checks.dotted_name(cls), checks.base_names(cls)
        constructed = checks.attempt(lambda: self.construct(builder))
        if not constructed.ok:
            return BuilderFacts(cls=name, bases=bases, status="not-run", reason=constructed.error)
        engine = self.engine(builder)
        kinds, reasons = [], {}
        for kind, spec in KIND_SPECS.items():
            outcome = checks.attempt(lambda s=spec: self.build(builder, engine.record(s)))
            if outcome.ok:
                kinds.append(kind)
            else:
                reasons[kind] = outcome.error
        status = "built" if kinds else "constructed"
        reads = self.layer_reads(builder, kinds[0] if kinds else None)
        names = checks.top_level(reads.first["init"] | reads.first["build"])
        required, every = checks.leave_one_out(
            lambda layers: self._construct_and_build(builder, layers, kinds),
            engine.make_layer,
            LAYER_NAMES,
            names,
        )
        return BuilderFacts(
            cls=name,
            bases=bases,
            status=status,
            reason=checks.grouped_reasons(reasons),
            batch_kinds=tuple(kinds),
            reads={p: tuple(sorted(reads.first[p])) for p in ("init", "build")},
            required=required,
            required_on_every_layer=every,
        )

    def _construct_and_build(self, builder: str, layers: dict[str, Any], kinds: list[str]) -> None:
        built = self.construct(builder, layers)
        engine = self.engine(builder)
        for kind in kinds:
            engine.build(built, engine.record(KIND_SPECS[kind]))

    def layer_reads(self, builder: str, kind: str | None) -> checks.LayerReads:
        engine = self.engine(builder)
        record = engine.record(KIND_SPECS[kind]) if kind else None
        return checks.record_reads(
            lambda layers: engine.construct(builder, dict(layers)),
            lambda built: engine.build(built, record) if record is not None else None,
            engine.make_layer,
            LAYER_NAMES,
        )

    # -- the record ---------------------------------------------------------------------

    def field_facts(self, built: list[str]) -> dict[str, FieldFacts]:
        cls = record_class()
        optional = checks.optional_fields(cls)
        needs: dict[str, dict[str, str]] = {}
        for builder in built:
            engine = self.engine(builder)
            measured = checks.field_needs(
                lambda b, record, e=engine: e.build(self.construct(b), record),
                [builder],
                self.records(builder),
                optional,
            )
            for field_name, errors in measured.items():
                needs.setdefault(field_name, {}).update(errors)
        return optional_field_facts(optional, needs)

    def transformation_facts(self) -> dict[str, TransformFacts]:
        """What each of vLLM's transformations of the record drops (measured with TRITON_MLA)."""
        from conformance.engines.vllm.transforms import transformation_facts

        return transformation_facts(self.engine("TRITON_MLA"))

    def provenance(self, built: list[str]) -> dict[str, Any]:
        """Nothing beside the builders that built."""
        return {}


def measure(workdir: Path, *, version: str, builders: list[str] | None = None) -> EngineFacts:
    """Every measurement of the installed vLLM, as `EngineFacts`."""
    names = builders or list(BUILDERS)
    return engine_facts(
        Measurement(workdir), names, engine="vllm", version=version, record_class=record_class
    )


def main(argv: list[str]) -> int:
    import tempfile

    import vllm

    out = Path(argv[0])
    with tempfile.TemporaryDirectory() as workdir:
        facts = measure(Path(workdir), version=vllm.__version__)
    write_facts(out, facts)
    print(f"facts written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
