"""Measure SGLang's facts: which MLA backends build their metadata, what they read and need.

`Measurement` holds one model runner per backend (`runner.make_runner`) and constructs the
backend through SGLang's registry; ``init_forward_metadata(ForwardBatch)`` is its builder.
`measure` returns `EngineFacts` keyed to SGLang's record (`ForwardBatch`) and backends:
``reads.init`` are the model runner's attributes read at construction (dotted, e.g.
``model_config.dtype``), ``reads.build`` those read by ``init_forward_metadata``;
``required`` those whose absence (leave-one-out on the runner and its model config) made
construction or the build fail. The `RadixAttention` reads of each backend's forward are
in ``provenance.layer_reads`` (`conformance.engines.sglang.layer`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from conformance.engines import checks
from conformance.engines.facts import (
    BuilderFacts,
    EngineFacts,
    FieldFacts,
    TransformFacts,
    optional_field_facts,
)
from conformance.engines.measurement import engine_facts
from conformance.engines.sglang.adapter import (
    BACKENDS,
    SuiteModelConfig,
    backend_class,
    record_class,
)
from conformance.engines.sglang.aiter_standin import HIP_FP8, device_to_cpu, standin
from conformance.engines.sglang.batch import KIND_SPECS, OPTIONAL_SET, forward_batch
from conformance.engines.sglang.runner import make_runner
from conformance.stubs.recorder import log_of, record_layer

RUNNER_OMITTABLE = (
    "model_config",
    "req_to_token_pool",
    "token_to_kv_pool",
    "kv_cache_dtype",
    "device",
    "page_size",
)


AITER_MODE_GLOBALS = ("fast_mode", "intra_batch_mode", "_use_mla_ps_kernel")
"""Module globals `AiterAttnBackend.__init__` rewrites (``global``) for later backends."""
_AITER_DEFAULTS: dict[str, Any] = {}


def prepare_aiter() -> None:
    """The aiter stand-in in place, SGLang's aiter backend on HIP's fp8 dtype, and its
    planner-mode globals back at their import-time values (one backend per process, as
    in a server: an earlier construction here must not choose a later one's planner)."""
    standin()
    import sglang.srt.layers.attention.aiter_backend as aiter_backend

    aiter_backend.fp8_dtype = HIP_FP8
    if not _AITER_DEFAULTS:
        _AITER_DEFAULTS.update({n: getattr(aiter_backend, n) for n in AITER_MODE_GLOBALS})
    for name, value in _AITER_DEFAULTS.items():
        setattr(aiter_backend, name, value)


class Measurement:
    """One runner per backend, and what was measured on its backend."""

    def __init__(self, heads: int = 16, batch_size: int = 16) -> None:
        self.heads, self.batch_size = heads, batch_size
        self._runners: dict[str, Any] = {}

    def runner(self, name: str) -> Any:
        if name not in self._runners:
            if BACKENDS[name].standin:
                prepare_aiter()
            with device_to_cpu():
                self._runners[name] = make_runner(
                    name, heads=self.heads, batch_size=self.batch_size, fp8_dtype=HIP_FP8
                )
        return self._runners[name]

    def construct(self, name: str, runner: Any = None) -> Any:
        """SGLang's backend `name`, through its registry, over `runner` (default: its own)."""
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

        if BACKENDS[name].standin:
            prepare_aiter()
        with device_to_cpu():
            return ATTENTION_BACKENDS[name](runner if runner is not None else self.runner(name))

    def build(self, backend: Any, batch: Any) -> Any:
        """The backend's builder: ``init_forward_metadata(forward_batch)``."""
        with device_to_cpu():
            return backend.init_forward_metadata(batch)

    def batch(self, name: str, kind: str, omit: tuple[str, ...] = ()) -> Any:
        return forward_batch(KIND_SPECS[kind], self.runner(name), omit=omit)

    @contextlib.contextmanager
    def runner_without(self, name: str, attribute: str) -> Iterator[Any]:
        """The runner of `name` lacking `attribute` (``model_config.X``: its config lacks X)."""
        runner = self.runner(name)
        if attribute.startswith("model_config."):
            saved = runner.model_config
            runner.model_config = SuiteModelConfig(
                heads=self.heads, dtype=runner.dtype, omit=(attribute.split(".", 1)[1],)
            )
            try:
                yield runner
            finally:
                runner.model_config = saved
            return
        saved_value = runner.__dict__.pop(attribute)
        try:
            yield runner
        finally:
            runner.__dict__[attribute] = saved_value

    # -- per backend --------------------------------------------------------------------

    def builder_facts(self, name: str) -> BuilderFacts:
        try:
            cls = backend_class(name)
        except Exception as error:  # an engine module that does not import is a finding
            return BuilderFacts(cls="", status="not-run", reason=checks.one_line(error))
        dotted, bases = checks.dotted_name(cls), checks.base_names(cls)
        built: list[Any] = []
        constructed = checks.attempt(lambda: built.append(self.construct(name)))
        if not constructed.ok:
            return BuilderFacts(cls=dotted, bases=bases, status="not-run", reason=constructed.error)
        kinds, reasons = [], []
        for kind in KIND_SPECS:
            outcome = checks.attempt(lambda k=kind: self.build(built[0], self.batch(name, k)))
            (kinds.append(kind) if outcome.ok else reasons.append(f"{kind}: {outcome.error}"))
        reads = self.runner_reads(name, kinds)
        candidates = [r for r in sorted(reads["init"] | reads["build"]) if self._omittable(r)]
        required = {}
        for attribute in candidates:
            with self.runner_without(name, attribute) as runner:
                outcome = checks.attempt(lambda r=runner: self._construct_and_build(name, r, kinds))
            if not outcome.ok:
                required[attribute] = outcome.error
        return BuilderFacts(
            cls=dotted,
            bases=bases,
            status="built" if kinds else "constructed",
            reason="; ".join(reasons),
            batch_kinds=tuple(kinds),
            reads={p: tuple(sorted(reads[p])) for p in ("init", "build")},
            required=required,
        )

    @staticmethod
    def _omittable(path: str) -> bool:
        head, _, rest = path.partition(".")
        if head == "model_config":
            return bool(rest) and "." not in rest and not rest.startswith("get_")
        return head in RUNNER_OMITTABLE and not rest

    def _construct_and_build(self, name: str, runner: Any, kinds: list[str]) -> None:
        backend = self.construct(name, runner)
        for kind in kinds:
            self.build(backend, forward_batch(KIND_SPECS[kind], runner))

    def runner_reads(self, name: str, kinds: list[str]) -> dict[str, frozenset[str]]:
        """The runner's attributes read at construction (init) and by the builder (build)."""
        proxy = record_layer(self.runner(name), name=f"{name} model runner", strict=False)
        log = log_of(proxy)
        log.current_phase = "init"
        backend = self.construct(name, proxy)
        log.current_phase = "build"
        for kind in kinds:
            self.build(backend, self.batch(name, kind))
        return {"init": log.reads("init"), "build": log.reads("build")}

    # -- the record ---------------------------------------------------------------------

    def field_facts(self, built: list[str]) -> dict[str, FieldFacts]:
        needs: dict[str, dict[str, str]] = {}
        for name in built:
            backend = self.construct(name)
            records: dict[str, Callable[..., Any]] = {
                kind: (lambda omit, k=kind, n=name: self.batch(n, k, tuple(omit)))
                for kind in KIND_SPECS
            }
            measured = checks.field_needs(
                lambda _b, record, be=backend: self.build(be, record), [name], records, OPTIONAL_SET
            )
            for field_name, errors in measured.items():
                needs.setdefault(field_name, {}).update(errors)
        return optional_field_facts(OPTIONAL_SET, needs)

    def transformation_facts(self) -> dict[str, TransformFacts]:
        """None measured: SGLang's record has no transformation the audit follows."""
        return {}

    def provenance(self, built: list[str]) -> dict[str, Any]:
        """The `RadixAttention` reads and needs of each built backend's forward."""
        from conformance.engines.sglang.layer import layer_facts

        return layer_facts(self, built)


def measure(*, version: str, backends: list[str] | None = None) -> EngineFacts:
    """Every measurement of the installed SGLang, as `EngineFacts`."""
    names = backends or list(BACKENDS)
    return engine_facts(
        Measurement(), names, engine="sglang", version=version, record_class=record_class
    )
