"""Family B on SGLang: the model runner's reads at construction, RadixAttention's at forward."""

from __future__ import annotations

import pytest

from conformance.engines import checks
from conformance.engines.sglang.adapter import SuiteModelConfig, kit_config
from conformance.engines.target import engine_target
from conformance.errors import StubIncompleteError
from conformance.stubs.recorder import record_layer

MUST_BUILD = engine_target("sglang").must_build


@pytest.mark.parametrize("name", MUST_BUILD)
def test_construction_reads_and_leave_one_out(facts, name, record_property) -> None:
    backend = facts.builders[name]
    record_property("reads", ",".join(sorted(backend.read_set())))
    record_property("required", ",".join(sorted(backend.required)))
    assert backend.required, f"{name}: leave-one-out found nothing required"
    assert set(backend.required) <= backend.read_set(), f"{name}: required but never read"


@pytest.mark.parametrize("name", MUST_BUILD)
def test_radix_attention_forward_reads(facts, name, record_property) -> None:
    reads = facts.provenance["layer_reads"].get(name)
    assert reads, f"{name}: forward not run: {facts.provenance['layer_not_run'].get(name)}"
    required = facts.provenance["layer_required"][name]
    record_property("layer_reads", ",".join(reads))
    record_property("layer_required", ",".join(sorted(required)))
    assert required and set(required) <= set(reads), (name, required)


def test_kit_model_config_lacks_what_aiter_reads(facts, run, record_property) -> None:
    """Issue question 1: SGLang's MLA test kit's TinyMLAModelConfig against aiter's needs.

    Measured: AiterAttnBackend.__init__ requires ``model_config.dtype``
    (aiter_backend.py: ``self.input_dtype = model_runner.model_config.dtype``); the kit's
    config has no ``dtype`` (a #52139-class stub bug in SGLang's kit). The check fails if the
    kit's config lacks any other attribute the backend requires, or once it gains ``dtype``.
    """
    needed = [
        p.split(".", 1)[1]
        for p in facts.builders["aiter"].required
        if p.startswith("model_config.")
    ]
    missing = sorted(a for a in needed if not hasattr(kit_config(run.heads), a))
    record_property("kit_missing", ",".join(missing))
    assert missing == ["dtype"], f"the kit's TinyMLAModelConfig lacks {missing}"
    runner = run.runner("aiter")
    saved, runner.model_config = runner.model_config, kit_config(run.heads)
    try:
        outcome = checks.attempt(lambda: run.construct("aiter"))
    finally:
        runner.model_config = saved
    assert not outcome.ok and "dtype" in outcome.error, outcome


@pytest.mark.negative_control
def test_model_config_stub_without_dtype_fails_naming_it(run) -> None:
    """A strict stub model config without ``dtype`` fails SGLang's aiter backend, by name."""
    runner = run.runner("aiter")
    stub = record_layer(
        SuiteModelConfig(heads=run.heads, dtype=runner.dtype, omit=("dtype",)), name="model_config"
    )
    saved, runner.model_config = runner.model_config, stub
    try:
        with pytest.raises(StubIncompleteError, match="dtype"):
            run.construct("aiter")
    finally:
        runner.model_config = saved
