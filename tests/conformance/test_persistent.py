"""Family C: persistent decode against stored goldens (plans, outputs, fp8 planning).

Each golden (tests/goldens, `conformance.goldens`) holds a DeepSeek-R1 decode batch, the
exact AITER v1.2 plan of the reference planner and the reference output and LSE. For the
selected backend:

- its builder's plan equals the golden plan on every written region and passes the
  invariants (cases whose arch, and CU count, the backend plans for), and a natively
  made plan passes the backend's own check against the reference planner;
- its decode output and LSE match the golden within the tolerance derived from its
  numerics (`conformance.goldens.tolerance`), with its own plan where it can plan the
  case and the golden plan fed otherwise; errors are recorded as JUnit properties;
- the output stays within that tolerance when the plan is made for another CU count;
- NaN-poisoned cache slots past each sequence never reach the output (golden plan fed);
- the planner call its builder makes, replayed with the run's dtypes forced, gives the
  same buffers (vLLM's fp8 golden test, #46997), for cases with an fp8 q or cache;
- the golden files are intact (sha256 against the manifest).

Cases are parametrized from the manifest at collection; a backend with
``tiny_cases_only`` runs the cases marked tiny, and the decode checks run on the cases
whose profile the backend's ``decode_archs()`` accepts (None: every plan). Test bodies
never name a backend.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from backends import registry
from backends.base import Backend, DecodeMetadata, MetadataBuilder
from conformance.goldens import (
    Golden,
    GoldenCase,
    GoldenStore,
    load_golden,
    lse_tolerance,
    output_tolerance,
)
from conformance.goldens.record import plans_equal
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.numerics.compare import CompareReport, Element, compare
from conformance.numerics.tolerances import Tolerance
from conformance.persistent import check_plan, plan_persistent_decode
from conformance.persistent.plan import PLAN_BUFFERS, WorkInfo, WorkPlan
from conformance.stubs.protocol import MLAAttentionLayer

OUTPUT_DTYPES = (torch.bfloat16, torch.float32)
"""Output dtypes accepted from `Backend.decode` (bf16 per the interface; the CPU
reference returns its fp32 result unrounded)."""
PLAN_SCALARS = ("num_works", "num_partials", "num_tiles", "fold_ratio", "heads_per_work")


@dataclass(frozen=True)
class Capabilities:
    """What the backend declares it can plan and execute (`Backend` hooks)."""

    plan_archs: tuple[str, ...] = ()
    plan_cu_counts: tuple[int, ...] | None = None  # None: any program count
    decode_archs: tuple[str, ...] | None = None  # None: any plan

    @classmethod
    def of(cls, backend: Backend) -> Capabilities:
        """The backend's declarations (empty when it cannot say, e.g. unavailable)."""
        try:
            return cls(
                tuple(backend.plan_archs()),
                backend.plan_cu_counts(),
                backend.decode_archs(),
            )
        except Exception:  # an unavailable backend's tests are skipped anyway
            return cls()

    def plans(self, case: GoldenCase, num_cus: int) -> bool:
        """Whether its builder plans this batch itself for `num_cus` programs."""
        counts = self.plan_cu_counts
        return (
            case.via_builder
            and case.arch in self.plan_archs
            and (counts is None or num_cus in counts)
        )

    def decodes(self, case: GoldenCase) -> bool:
        """Whether its decode executes plans of this case's profile."""
        return self.decode_archs is None or case.arch in self.decode_archs


Selector = Callable[[GoldenCase, Capabilities], bool]
SELECTORS: dict[str, Selector] = {
    # decode and NaN poison: every case whose plans the backend executes
    "golden_id": lambda case, caps: caps.decodes(case),
    # the backend's builder must reproduce the golden plan
    "plan_id": lambda case, caps: caps.plans(case, case.num_cus),
    # the spy replay (vLLM's fp8 golden test) needs an fp8 q or cache
    "spy_id": lambda case, caps: caps.plans(case, case.num_cus) and case.has_fp8,
    # plan invariance: the same batch planned for another program count
    "replan_id": lambda case, caps: case.via_builder and caps.decodes(case),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the case fixtures from the golden manifest, ids = case ids."""
    wanted = [name for name in SELECTORS if name in metafunc.fixturenames]
    if not wanted:
        return
    manifest = GoldenStore().read_manifest()
    cases = [GoldenCase.from_json(entry.case) for entry in manifest.entries.values()]
    try:
        backend = registry.get_backend(metafunc.config.getoption("backend"))
    except Exception:  # unknown or broken backend: the plugin reports it
        backend = None
    caps = Capabilities()
    if backend is not None:
        if backend.tiny_cases_only:
            cases = [case for case in cases if case.tiny]
        caps = Capabilities.of(backend)
    for name in wanted:
        ids = [case.id for case in cases if SELECTORS[name](case, caps)]
        metafunc.parametrize(name, ids, ids=ids)


# --------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module", autouse=True)
def one_thread_per_xdist_worker() -> Iterator[None]:
    """Under pytest-xdist, run torch single-threaded while this module runs.

    Several workers with one intra-op thread per core each oversubscribe the CPU; with
    OpenMP's spinning threads the CPU decodes here ran ~10x slower (measured on 2 cores).
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def golden_store() -> GoldenStore:
    """The golden directory ($MLA_CONFORMANCE_GOLDENS or tests/goldens)."""
    return GoldenStore()


@pytest.fixture(scope="session")
def goldens(golden_store: GoldenStore) -> Callable[[str], Golden]:
    """Load a golden by case id (sha256-verified once per session)."""
    loaded: dict[str, Golden] = {}

    def load(case_id: str) -> Golden:
        if case_id not in loaded:
            loaded[case_id] = load_golden(golden_store, case_id)
        return loaded[case_id]

    return load


@pytest.fixture
def record_errors(request: pytest.FixtureRequest) -> Callable[[str, object], None]:
    """Record a JUnit property of this test (``user_properties``: unlike the
    ``record_property`` fixture, no warning under the default xunit2 family)."""
    return lambda name, value: request.node.user_properties.append((name, value))


@pytest.fixture
def golden_builder(
    backend: Backend, layer_name: str
) -> Callable[..., tuple[MetadataBuilder, Callable[[], DecodeMetadata]]]:
    """The backend's real builder for a golden, and a function building its batch."""

    def make(golden: Golden, **changes: Any) -> tuple[MetadataBuilder, Callable[[], Any]]:
        layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=golden.case.heads)
        config = golden.builder_config(backend.device, **changes)
        builder = backend.make_builder(config, [layer_name], {layer_name: layer})

        def build() -> DecodeMetadata:
            meta = builder.build(golden.cam(backend.device))
            assert meta.decode is not None and meta.decode.plan is not None, (
                f"case {golden.case.id}: the builder produced no decode plan "
                f"(num_decodes={meta.num_decodes})"
            )
            return meta.decode

        return builder, build

    return make


def run_decode(backend: Backend, golden: Golden, decode: DecodeMetadata) -> tuple:
    """The backend's decode of a golden batch over its NaN-poisoned cache."""
    device = backend.device
    return backend.decode(
        golden.q(device),
        golden.kv_cache(device),
        decode,
        sm_scale=golden.sm_scale,
        q_scale=golden.q_scale,
        kv_scale=golden.kv_scale,
    )


def _first_difference(name: str, actual: torch.Tensor, expected: torch.Tensor) -> str:
    if actual.shape != expected.shape:
        return f"{name}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    where = torch.nonzero(actual != expected)
    row = tuple(int(i) for i in where[0])
    if name == "work_info_set":
        w = row[0]
        got, want = WorkInfo(*actual[w].tolist()), WorkInfo(*expected[w].tolist())
        return (
            f"{name}: {len(where)} entries differ; first at work {w}:\n"
            f"      actual   {got}\n      expected {want}"
        )
    return (
        f"{name}: {len(where)} entries differ; first at {row}: actual "
        f"{actual[row].tolist()}, expected {expected[row].tolist()}"
    )


def assert_same_plan(
    *, actual: WorkPlan, expected: WorkPlan, case_id: str, what: str, against: str
) -> None:
    """Equal buffer shapes, plan scalars and written regions; the message names the field."""
    __tracebackhide__ = True
    problems = []
    for name in PLAN_BUFFERS:
        a, e = getattr(actual, name), getattr(expected, name)
        if tuple(a.shape) != tuple(e.shape):
            problems.append(f"{name}: buffer shape {tuple(a.shape)}, expected {tuple(e.shape)}")
    for name in PLAN_SCALARS:
        a, e = getattr(actual, name), getattr(expected, name)
        if a != e:
            problems.append(f"{name}: {a}, expected {e}")
    got, want = actual.written_regions(), expected.written_regions()
    for name, w in want.items():
        g = got[name].to("cpu")
        if g.shape != w.shape or not torch.equal(g, w):
            problems.append(_first_difference(name, g, w))
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise AssertionError(f"case {case_id}: {what} differs from {against}:\n{lines}")


def _over_bound(element: Element, tol: Tolerance) -> float:
    """An element's error over its abs-or-rel bound (1.0: exactly at the tolerance)."""
    bound = max(tol.atol, tol.rtol * abs(element.expected))
    if bound > 0:
        return element.abs_err / bound
    return 0.0 if element.abs_err == 0 else float("inf")


def assert_result_matches(
    *,
    out: torch.Tensor,
    lse: torch.Tensor,
    golden: Golden,
    backend: Backend,
    record: Callable[[str, object], None],
    what: str,
) -> tuple[CompareReport, CompareReport]:
    """Compare a decode result with the golden; `record` the errors (JUnit properties)."""
    __tracebackhide__ = True
    case = golden.case
    assert out.dtype in OUTPUT_DTYPES, (
        f"case {case.id}: {what} output dtype {out.dtype}, expected one of {OUTPUT_DTYPES}"
    )
    out_tol = output_tolerance(case.q_torch_dtype, case.kv_torch_dtype, backend.numerics)
    lse_tol = lse_tolerance(case.q_torch_dtype, case.kv_torch_dtype, backend.numerics)
    out_report = compare(
        out, golden["out"], tol=out_tol, name=f"{case.id} {what} out", dtype=out.dtype
    )
    lse_report = compare(
        lse, golden["lse"], tol=lse_tol, name=f"{case.id} {what} lse", dtype=torch.float32
    )
    for prefix, report in (("out", out_report), ("lse", lse_report)):
        record(f"{prefix}_max_abs_err", report.max_abs_err)
        record(f"{prefix}_max_rel_err", report.max_rel_err)
        record(f"{prefix}_cos_diff", report.cos_diff)
        # the tolerance, and the worst element's error over its own abs-or-rel bound
        record(f"{prefix}_atol", report.tol.atol)
        record(f"{prefix}_rtol", report.tol.rtol)
        record(f"{prefix}_cos_tol", report.tol.cos_diff)
        record(
            f"{prefix}_err_over_tol",
            max((_over_bound(e, report.tol) for e in report.worst), default=0.0),
        )
    failed = [r.message() for r in (out_report, lse_report) if not r.ok]
    if failed:
        raise AssertionError("\n".join(failed))
    return out_report, lse_report


# --------------------------------------------------------------------------------------
# The golden set itself


def test_goldens_are_intact(golden_store: GoldenStore) -> None:
    problems = golden_store.verify()
    assert not problems, "golden files fail verification:\n" + "\n".join(f"  {p}" for p in problems)


# --------------------------------------------------------------------------------------
# Plans


def test_plan_matches_golden(plan_id: str, backend: Backend, goldens, golden_builder) -> None:
    golden = goldens(plan_id)
    case = golden.case
    _, build = golden_builder(golden)
    decode = build()
    for name in ("kv_indptr", "kv_indices", "kv_last_page_lens"):
        got, want = getattr(decode, name).cpu(), golden[name]
        assert torch.equal(got.to(torch.int32), want), (
            f"case {case.id}: the builder's {name} {got.tolist()[:16]} differs from the "
            f"golden's {want.tolist()[:16]}"
        )
    assert_same_plan(
        actual=decode.plan,
        expected=golden.plan(),
        case_id=case.id,
        what="the backend's plan",
        against="the golden plan",
    )
    native = backend.native_plan_check(decode)  # None: planned with the reference planner
    assert not native, f"case {case.id}: the native plan differs from the reference:\n" + (
        "\n".join(f"  {p}" for p in native or [])
    )
    violations = check_plan(
        decode.plan.to("cpu"),
        qo_indptr=golden["query_start_loc"],
        kv_indptr=golden["kv_indptr"],
        kv_last_page_lens=golden["kv_last_page_lens"],
        page_size=case.page_size,
        causal=True,
        max_seqlen_qo=case.q_len,
        uni_seqlen_qo=case.q_len,
        kv_granularity=case.granularity,
        max_split_per_batch=case.max_split_per_batch,
        num_cus=case.num_cus,
    )
    assert not violations, f"case {case.id}: the backend's plan breaks invariants:\n" + "\n".join(
        f"  {v}" for v in violations
    )


def test_planner_call_replays_with_fp8_dtypes(spy_id: str, goldens, golden_builder) -> None:
    """vLLM's fp8 golden: the builder's planner call, replayed with the run's dtypes."""
    golden = goldens(spy_id)
    case = golden.case
    builder, build = golden_builder(golden)
    calls: list[tuple[tuple, dict]] = []
    planner = builder.planner

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, dict(kwargs)))
        return planner(*args, **kwargs)

    builder.planner = spy
    decode = build()
    assert len(calls) == 1, f"case {case.id}: the builder called its planner {len(calls)} times"
    args, kwargs = calls[0]
    forced = {**kwargs, "q_dtype": case.q_torch_dtype, "kv_dtype": case.kv_torch_dtype}
    replay = planner(*args, **forced)
    passed = {k: kwargs.get(k) for k in ("q_dtype", "kv_dtype")}
    assert_same_plan(
        actual=decode.plan,
        expected=replay,
        case_id=case.id,
        what=f"the builder's plan (planner called with {passed})",
        against="the replay with the run's dtypes",
    )


# --------------------------------------------------------------------------------------
# Decode results


def test_decode_matches_golden(
    golden_id: str, backend: Backend, goldens, golden_builder, record_errors
) -> None:
    golden = goldens(golden_id)
    if Capabilities.of(backend).plans(golden.case, golden.case.num_cus):
        decode = golden_builder(golden)[1]()
        what = "decode (own plan)"
    else:
        decode = golden.decode_metadata(backend.device)
        what = "decode (golden plan fed)"
    out, lse = run_decode(backend, golden, decode)
    assert_result_matches(
        out=out, lse=lse, golden=golden, backend=backend, record=record_errors, what=what
    )


def test_decode_is_plan_invariant(
    replan_id: str, backend: Backend, goldens, golden_builder, record_errors
) -> None:
    """Another CU count gives another plan; the output stays within the derived bound.

    With bf16 q the result does not depend on the plan beyond fp32 rounding. With fp8 q,
    P is rounded to fp8 against each split's own max, so the result depends on the split
    layout: the bound is the triangle-inequality one of `output_tolerance` (backend vs
    fp64 reference plus golden vs fp64 reference), which holds for any plan.
    """
    golden = goldens(replan_id)
    case = golden.case
    if Capabilities.of(backend).plans(case, case.alt_num_cus):
        decode = golden_builder(golden, num_cus=case.alt_num_cus)[1]()
        plan = decode.plan
    else:
        plan = plan_persistent_decode(**{**golden.planner_call(), "num_cus": case.alt_num_cus})
        decode = golden.decode_metadata(backend.device, plan=plan)
    assert not plans_equal(plan, golden.plan()), (
        f"case {case.id}: the plan for {case.alt_num_cus} CUs equals the golden plan "
        f"({case.num_cus} CUs); the check would compare a plan with itself"
    )
    out, lse = run_decode(backend, golden, decode)
    assert_result_matches(
        out=out,
        lse=lse,
        golden=golden,
        backend=backend,
        record=record_errors,
        what=f"decode planned for {case.alt_num_cus} CUs",
    )


def test_poisoned_slots_never_reach_the_output(golden_id: str, backend: Backend, goldens) -> None:
    golden = goldens(golden_id)
    case = golden.case
    cache = golden.kv_cache("cpu")
    poisoned = int(torch.isnan(cache.float()).any(dim=-1).sum())
    assert poisoned == golden.poisoned_slots > 0, (
        f"case {case.id}: expected {golden.poisoned_slots} NaN-poisoned cache slots, "
        f"found {poisoned}"
    )
    out, lse = run_decode(backend, golden, golden.decode_metadata(backend.device))
    for name, value in (("output", out), ("lse", lse)):
        nan = torch.isnan(value.float().cpu())
        if bool(nan.any()):
            token, head = (int(i) for i in torch.nonzero(nan)[0][:2])
            pytest.fail(
                f"case {case.id}: the {name} has {int(nan.sum())} NaN entries, first at "
                f"token {token}, head {head}: the decode read a NaN-poisoned cache slot "
                f"(past a sequence's end, or an unused block)"
            )
