"""An engine test's verdicts on one of the engine's builders: its measured status
(``test_builder_builds``) and its builds of the suite's batch sweep.

Each engine target's tests (tests/engines/<engine>/test_family_a.py) judge its builders the
same way; CI's JUnit check (`conformance.ci.engine_junit`) then requires the test of each
builder the target must build to have passed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

import pytest

from conformance.engines.checks import attempt
from conformance.engines.facts import BuilderFacts
from conformance.metadata.batch import BatchSpec


def judge_builder(
    name: str,
    builder: BuilderFacts,
    must_build: Collection[str],
    batch_kinds: Collection[str],
    record_property: Callable[[str, object], None],
) -> None:
    """Record the builder's status, class and batch kinds on the test. A builder the target
    must build fails unless it built on every batch kind; another that did not build skips,
    saying why."""
    __tracebackhide__ = True
    record_property("builder_status", builder.status)
    record_property("builder_class", builder.cls)
    record_property("batch_kinds", ",".join(builder.batch_kinds))
    if name in must_build:
        if builder.status != "built" or set(builder.batch_kinds) != set(batch_kinds):
            raise AssertionError(
                f"{name}: {builder.reason} (status {builder.status}, built on "
                f"{sorted(builder.batch_kinds)}, expected {sorted(batch_kinds)})"
            )
    elif builder.status != "built":
        pytest.skip(f"{name} {builder.status} only: {builder.reason}")


def judge_sweep(
    name: str,
    specs: Iterable[BatchSpec],
    build: Callable[[BatchSpec], object],
    batch_kind: Callable[[BatchSpec], str],
) -> None:
    """Fail naming every batch of `specs` that the builder `name` does not build
    (``build(spec)`` raises), with its batch kind and the error."""
    __tracebackhide__ = True
    failures = []
    for spec in specs:
        outcome = attempt(lambda s=spec: build(s))
        if not outcome.ok:
            failures.append(f"{spec.name} ({batch_kind(spec)}): {outcome.error}")
    if failures:
        raise AssertionError(f"{name} failed on: {failures}")
