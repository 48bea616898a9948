"""What the golden families assert: a decode result within tolerance, a plan equal to a
golden plan; and which cases a backend runs (its metadata, fed or built).

Used by tests/conformance/test_numerics.py (every backend) and test_plan.py (backends
declaring the AITER v1 plan format); messages name the case, the field and the figures.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from backends.base import Backend, DecodeMetadata
from conformance.applicability import lse_compared
from conformance.goldens.cases import GoldenCase
from conformance.goldens.record import Golden
from conformance.goldens.tolerance import lse_tolerance, output_tolerance
from conformance.numerics.compare import CompareReport, Element, compare
from conformance.numerics.masking import JUDGED
from conformance.numerics.tolerances import Tolerance
from conformance.persistent.plan import PLAN_BUFFERS, WorkInfo, WorkPlan
from conformance.persistent.planner import plan_persistent_decode

OUTPUT_DTYPES = (torch.bfloat16, torch.float32)
"""Output dtypes accepted from `Backend.decode` (bf16 per the interface; the CPU
reference returns its fp32 result unrounded)."""
PLAN_SCALARS = ("num_works", "num_partials", "num_tiles", "fold_ratio", "heads_per_work")
PADDED_ROWS_DOC = 'docs/plugins.md, "Padded rows"'


@dataclass(frozen=True)
class Capabilities:
    """What a plan-format backend declares it can plan and execute (`Backend` hooks)."""

    plan_archs: tuple[str, ...] = ()
    plan_cu_counts: tuple[int, ...] | None = None  # None: any program count
    decode_archs: tuple[str, ...] | None = None  # None: any plan

    @classmethod
    def of(cls, backend: Backend) -> Capabilities:
        """The backend's declarations (empty when it cannot say, e.g. unavailable)."""
        if backend.plan_format is None:
            return cls()
        try:
            return cls(
                tuple(backend.plan_archs()), backend.plan_cu_counts(), backend.decode_archs()
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


@contextmanager
def padded_rows_explained(case_id: str, what: str, rows: int, requests: int) -> Iterator[None]:
    """Turn an `IndexError` raised while a batch with padded rows runs into a failure that
    says what the backend got wrong: it read the CSR lists for every decode row."""
    __tracebackhide__ = True
    try:
        yield
    except IndexError as exc:
        if rows == requests:
            raise
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise AssertionError(
            f"case {case_id}: {what} raised IndexError ({exc}) at {frame.filename}:"
            f"{frame.lineno}: the batch has {rows} decode rows but {requests} CSR requests "
            f"(rows past {requests} are padding, see {PADDED_ROWS_DOC}); read kv_indptr, "
            f"kv_indices and kv_last_page_lens for range(decode.num_requests), not num_decodes"
        ) from exc


def numerics_metadata(
    backend: Backend, golden: Golden, builder_for: Callable[..., tuple[Any, Callable[[], Any]]]
) -> tuple[DecodeMetadata, str]:
    """The decode metadata of the numerics contract, and how it was made (`_metadata`);
    a builder that indexes past the real requests of a padded batch fails naming them."""
    case = golden.case
    rows, requests = case.batch + case.pad_rows, case.batch
    with padded_rows_explained(case.id, "the builder", rows, requests):
        return _metadata(backend, golden, builder_for)


def _metadata(
    backend: Backend, golden: Golden, builder_for: Callable[..., tuple[Any, Callable[[], Any]]]
) -> tuple[DecodeMetadata, str]:
    """The decode metadata of the numerics contract, and how it was made.

    `builder_for(golden, **config changes)` gives the backend's builder for the golden.
    The backend's own builder builds it from the golden's CAM: with the golden's planner
    profile and CU count where a plan-format backend plans them, else with the backend's
    own. A plan-format backend whose decode executes the golden's profile but cannot plan
    it is fed the golden plan. A batch no CAM expresses (kv shorter than q) is fed as the
    golden's CSR lists, with a plan of a profile the backend executes.
    """
    device = backend.device
    case = golden.case
    caps = Capabilities.of(backend)
    planned = backend.plan_format is not None
    if not case.via_builder:
        if not planned or caps.decodes(case):
            return golden.decode_metadata(device, with_plan=planned), "decode (golden metadata fed)"
        own = {"arch": backend.plan_archs()[0], "num_cus": backend.default_num_cus()}
        call = {**golden.planner_call(), **own}
        decode = golden.decode_metadata(device, plan=plan_persistent_decode(**call))
        decode.planner_call = {**call, "causal": case.causal}
        return decode, f"decode (golden metadata fed, planned for {own['arch']})"
    if planned and caps.plans(case, case.num_cus):
        return builder_for(golden)[1](), "decode (own metadata)"
    if planned and caps.decodes(case):
        return golden.decode_metadata(device), "decode (golden plan fed)"
    build = builder_for(golden, arch=None, num_cus=None)[1]  # the backend's own profile
    return build(), "decode (own metadata)"


def run_decode(backend: Backend, golden: Golden, decode: DecodeMetadata) -> tuple:
    """The backend's decode of a golden batch over its NaN-poisoned cache; a decode that
    indexes past the CSR lists of a padded batch fails naming the padded rows."""
    device = backend.device
    with padded_rows_explained(
        golden.case.id, "the decode", decode.num_decodes, decode.num_requests
    ):
        return backend.decode(
            golden.q(device),
            golden.kv_cache(device),
            decode,
            sm_scale=golden.sm_scale,
            q_scale=golden.q_scale,
            kv_scale=golden.kv_scale,
        )


def _over_bound(element: Element, tol: Tolerance) -> float:
    """An element's error over its abs-or-rel bound (1.0: exactly at the tolerance)."""
    bound = max(tol.atol, tol.rtol * abs(element.expected))
    if bound > 0:
        return element.abs_err / bound
    return 0.0 if element.abs_err == 0 else float("inf")


def assert_result_matches(
    *,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    golden: Golden,
    backend: Backend,
    record: Callable[[str, object], None],
    what: str,
    parts: tuple[str, ...] = JUDGED,
) -> tuple[CompareReport, CompareReport | None]:
    """Compare a decode result with the golden; `record` the errors (JUnit properties).
    A None `lse` is compared with nothing where the suite derives it is not comparable
    (`conformance.applicability.lse_compared`), and fails anywhere else. `parts` judges
    the output or the LSE alone (both are compared and recorded either way)."""
    __tracebackhide__ = True
    case = golden.case
    assert out.dtype in OUTPUT_DTYPES, (
        f"case {case.id}: {what} output dtype {out.dtype}, expected one of {OUTPUT_DTYPES}"
    )
    dtypes = (case.q_torch_dtype, case.kv_torch_dtype, backend.numerics)
    out_tol = output_tolerance(*dtypes, score_rms=case.score_rms)
    lse_tol = lse_tolerance(*dtypes, score_rms=case.score_rms)
    out_report = compare(
        out, golden["out"], tol=out_tol, name=f"{case.id} {what} out", dtype=out.dtype
    )
    lse_report = (
        compare(lse, golden["lse"], tol=lse_tol, name=f"{case.id} {what} lse", dtype=torch.float32)
        if lse_compared(lse, f"case {case.id} {what}")
        else None
    )
    reports = [("out", out_report)] + ([("lse", lse_report)] if lse_report else [])
    for prefix, report in reports:
        record(f"{prefix}_max_abs_err", report.max_abs_err)
        record(f"{prefix}_max_rel_err", report.max_rel_err)
        record(f"{prefix}_cos_diff", report.cos_diff)
        # error / tolerance: the cosine one, and the largest error over atol (abs-or-rel
        # passes an element above atol that is within rtol of the golden)
        record(f"{prefix}_cos_ratio", report.cos_diff / report.tol.cos_diff)
        record(f"{prefix}_abs_ratio", report.max_abs_err / report.tol.atol)
        # the tolerance, and the worst element's error over its own abs-or-rel bound
        record(f"{prefix}_atol", report.tol.atol)
        record(f"{prefix}_rtol", report.tol.rtol)
        record(f"{prefix}_cos_tol", report.tol.cos_diff)
        record(
            f"{prefix}_err_over_tol",
            max((_over_bound(e, report.tol) for e in report.worst), default=0.0),
        )
    failed = [r.message() for prefix, r in reports if not r.ok and prefix in parts]
    if failed:
        raise AssertionError("\n".join(failed))
    return out_report, lse_report


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
        g, w = got[name].to("cpu"), w.to("cpu")  # either plan may live on the device
        if g.shape != w.shape or not torch.equal(g, w):
            problems.append(_first_difference(name, g, w))
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise AssertionError(f"case {case_id}: {what} differs from {against}:\n{lines}")
