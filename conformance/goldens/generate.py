"""Generating the goldens: deterministic inputs, the reference plan, the reference result.

For each `GoldenCase` (serially, one thread, fixed seeds):

1. inputs from the case's seed: a random block table (blocks drawn without replacement,
   block 0 the null block, spare blocks unused), kv tokens and q ~ N(0, 1), quantised to
   the arch's e4m3 flavour with the case's per-tensor scales where the case says fp8;
2. the plan of the reference planner, called with what a builder passes
   (the profile's default ``kv_granularity`` unless the case overrides it);
3. output and LSE from `kernels.plan_exec.execute_plan` on the NaN-poisoned paged cache
   (fp32, work by work, AITER semantics: P rounded to fp8 when q is fp8).

A golden is refused (`GenerationError`, nothing written) unless the plan passes the
invariants, the result agrees with the fp64 monolithic reference
`kernels.reference.mla_decode_reference` within its `GoldenBound` (fp32 rounding for
bf16 q, the fp32-reference error model for fp8 q), the plan shows every feature the
case expects (split tiles, the tail rule, fully masked split rows, ...), and the plan for
the case's ``alt_num_cus`` differs from it (its split layout too, when it splits).

Entry points: `build_golden` (one case, nothing written), `generate` (the CLI of
``python -m conformance.goldens generate [--check] [--only ID ...]``).
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from conformance.errors import ConformanceError, PlanError
from conformance.goldens.cases import GoldenCase, case_table
from conformance.goldens.record import (
    KV_LORA_RANK,
    PLAN_SCALARS,
    QK_DIM,
    SM_SCALE,
    plans_equal,
    poisoned_cache,
    same_works,
)
from conformance.goldens.store import (
    GoldenError,
    GoldenStore,
    Manifest,
    ManifestEntry,
    deserialize,
    serialize,
    sha256_bytes,
)
from conformance.goldens.tolerance import (
    GOLDEN_FP32_LSE,
    BoundCheck,
    check_bound,
    golden_output_bound,
)
from conformance.numerics.fp8 import quantize_per_tensor
from conformance.persistent.invariants import check_plan
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from conformance.persistent.planner import _plan, plan_persistent_decode
from conformance.persistent.profiles import get_profile
from kernels.plan_exec import PlanOutput, execute_plan
from kernels.reference import mla_decode_reference

GENERATOR_VERSION = "1"
"""Bump when generation changes in a way that changes the files."""
SPARE_BLOCKS = 2
"""Cache blocks no request uses: they stay NaN-poisoned."""

FEATURES: tuple[str, ...] = (
    "split",  # some qo tile is split over programs (partials + reduce)
    "fold",  # heads folded into virtual batches
    "qo-split",  # a request's q tokens span several qo tiles
    "tail-rule",  # the #2106 tail rule changed the plan
    "masked-split-rows",  # a split work has query rows that see none of its kv
    "all-neg-inf-group",  # a reduced row whose every split has lse = -inf
    "bf16-plan-differs",  # planning this fp8 case as bf16 gives other buffers (#46997)
    "capped",  # max_split_per_batch limits the programs that receive work
)


class GenerationError(ConformanceError):
    """A golden could not be generated or failed its checks; names the case."""


@dataclass(frozen=True)
class Inputs:
    """One case's deterministic inputs."""

    q: torch.Tensor
    kv_tokens: torch.Tensor
    q_scale: float
    kv_scale: float
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_lens: torch.Tensor
    num_blocks: int

    def cache(self, page_size: int) -> torch.Tensor:
        """The NaN-poisoned paged cache."""
        return poisoned_cache(
            self.kv_tokens,
            block_table=self.block_table,
            seq_lens=self.seq_lens,
            page_size=page_size,
            num_blocks=self.num_blocks,
        )


@dataclass
class GoldenData:
    """A generated golden, checked, ready to be written."""

    case: GoldenCase
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any]
    provenance: dict[str, Any] = field(default_factory=dict)


def _i32(values: Sequence[int]) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int32)


def make_inputs(case: GoldenCase) -> Inputs:
    """Inputs from the case's seed: block table, then kv tokens, then q (in that order)."""
    gen = torch.Generator().manual_seed(case.seed)
    page = case.page_size
    pages = [-(-n // page) for n in case.seq_lens]
    num_blocks = sum(pages) + 1 + SPARE_BLOCKS
    pool = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    table = torch.zeros((case.batch, max([1, *pages])), dtype=torch.int32)
    cursor = 0
    for b, count in enumerate(pages):
        table[b, :count] = _i32(pool[cursor : cursor + count])
        cursor += count
    kv = torch.randn(sum(case.seq_lens), QK_DIM, generator=gen)
    q = torch.randn(case.num_tokens, case.heads, QK_DIM, generator=gen)
    if case.kv_dtype == "fp8":
        kv_tokens, kv_scale = quantize_per_tensor(kv, case.fp8_dtype, case.kv_scale)
    else:
        kv_tokens, kv_scale = kv.to(torch.bfloat16), 1.0
    if case.q_dtype == "fp8":
        q_in, q_scale = quantize_per_tensor(q, case.fp8_dtype, case.q_scale)
    else:
        q_in, q_scale = q.to(torch.bfloat16), 1.0
    kv_indptr = _i32([0, *torch.tensor(pages).cumsum(0).tolist()])
    last = [n - (p - 1) * page for n, p in zip(case.seq_lens, pages, strict=True)]
    return Inputs(
        q=q_in,
        kv_tokens=kv_tokens,
        q_scale=q_scale,
        kv_scale=kv_scale,
        query_start_loc=_i32(range(0, case.num_tokens + 1, case.q_len)),
        seq_lens=_i32(case.seq_lens),
        block_table=table,
        kv_indptr=kv_indptr,
        kv_indices=torch.cat([table[b, :p] for b, p in enumerate(pages)]),
        kv_last_page_lens=_i32(last),
        num_blocks=num_blocks,
    )


def planner_kwargs(case: GoldenCase, inputs: Inputs) -> dict[str, Any]:
    """The reference planner's arguments for this case (what a builder passes)."""
    return {
        "qo_indptr": inputs.query_start_loc,
        "kv_indptr": inputs.kv_indptr,
        "kv_last_page_lens": inputs.kv_last_page_lens,
        "num_heads_q": case.heads,
        "max_seqlen_qo": case.q_len,
        "uni_seqlen_qo": case.q_len,
        "page_size": case.page_size,
        "kv_granularity": case.granularity,
        "causal": case.plan_causal,
        "max_split_per_batch": case.max_split_per_batch,
        "q_dtype": case.q_torch_dtype,
        "kv_dtype": case.kv_torch_dtype,
        "arch": case.arch,
        "num_cus": case.num_cus,
    }


def _all_neg_inf_rows(plan: WorkPlan, partial_lse: torch.Tensor) -> bool:
    ind, pmap = plan.reduce_indptr.tolist(), plan.reduce_partial_map.tolist()
    final = plan.reduce_final_map.tolist()
    for tile in plan.split_tiles():
        q0, q1 = final[tile]
        locs = pmap[ind[tile] : ind[tile + 1]]
        for i in range(q1 - q0):
            if all(bool((partial_lse[loc + i] == -math.inf).all()) for loc in locs):
                return True
    return False


def plan_features(
    case: GoldenCase, kwargs: dict[str, Any], plan: WorkPlan, result: PlanOutput
) -> list[str]:
    """Which `FEATURES` this case's plan and result show."""
    found = []
    if plan.split_tiles():
        found.append("split")
    if plan.fold_ratio > 1:
        found.append("fold")
    if plan.num_tiles > case.batch * plan.fold_ratio:
        found.append("qo-split")
    if not plans_equal(plan, _plan(**kwargs, walk="literal", tail_rule=False)):
        found.append("tail-rule")
    written = result.partial_written
    if bool((result.partial_lse[written] == -math.inf).any()):
        found.append("masked-split-rows")
    if _all_neg_inf_rows(plan, result.partial_lse):
        found.append("all-neg-inf-group")
    if case.has_fp8:
        as_bf16 = {**kwargs, "q_dtype": torch.bfloat16, "kv_dtype": torch.bfloat16}
        try:
            differs = not plans_equal(plan, plan_persistent_decode(**as_bf16))
        except PlanError:
            differs = True
        if differs:
            found.append("bf16-plan-differs")
    occupancy = get_profile(case.arch).occupancy
    if 0 < int(plan.params["num_splits"]) < case.num_cus * occupancy:
        found.append("capped")
    return found


def _json_call(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The planner call without its tensors, dtypes as names."""
    call = {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}
    call["q_dtype"] = str(call["q_dtype"])
    call["kv_dtype"] = str(call["kv_dtype"])
    return call


def _fail(case: GoldenCase, message: str) -> GenerationError:
    return GenerationError(f"golden {case.id}: {message}; refusing to write it")


def _checked_plan(case: GoldenCase, inputs: Inputs, kwargs: dict[str, Any]) -> WorkPlan:
    """The reference plan, required to pass the invariants."""
    try:
        plan = plan_persistent_decode(**kwargs)
    except PlanError as exc:
        raise _fail(case, f"the reference planner refused the case: {exc}") from None
    violations = check_plan(
        plan,
        qo_indptr=inputs.query_start_loc,
        kv_indptr=inputs.kv_indptr,
        kv_last_page_lens=inputs.kv_last_page_lens,
        page_size=case.page_size,
        causal=case.plan_causal,
    )
    if violations:
        raise _fail(case, "plan breaks invariants: " + "; ".join(map(str, violations)))
    return plan


def _checked_result(
    case: GoldenCase, inputs: Inputs, plan: WorkPlan
) -> tuple[PlanOutput, BoundCheck, BoundCheck]:
    """The plan replay, required to agree with the fp64 monolithic reference."""
    cache = inputs.cache(case.page_size)
    common: dict[str, Any] = {
        "sm_scale": SM_SCALE,
        "q_scale": inputs.q_scale,
        "kv_scale": inputs.kv_scale,
        "causal": True,
        "kv_lora_rank": KV_LORA_RANK,
    }
    result = execute_plan(
        plan,
        inputs.q,
        cache,
        kv_indptr=inputs.kv_indptr,
        kv_indices=inputs.kv_indices,
        kv_last_page_lens=inputs.kv_last_page_lens,
        page_size=case.page_size,
        **common,
    )
    ref_out, ref_lse = mla_decode_reference(
        inputs.q,
        cache,
        query_start_loc=inputs.query_start_loc,
        seq_lens=inputs.seq_lens,
        block_table=inputs.block_table,
        **common,
    )
    if bool(torch.isnan(result.out).any()) or bool(torch.isnan(result.lse).any()):
        raise _fail(case, "the plan replay left NaN in the output or LSE")
    bound = golden_output_bound(case.q_torch_dtype, case.kv_torch_dtype)
    out_check = check_bound(result.out, ref_out, bound)
    if not out_check.ok:
        raise _fail(case, f"output disagrees with the fp64 reference: {out_check.problem}")
    lse_check = check_bound(result.lse, ref_lse, GOLDEN_FP32_LSE)
    if not lse_check.ok:
        raise _fail(case, f"LSE disagrees with the fp64 reference: {lse_check.problem}")
    return result, out_check, lse_check


def _checked_alt_plan(
    case: GoldenCase, kwargs: dict[str, Any], plan: WorkPlan, features: list[str]
) -> tuple[WorkPlan, bool]:
    """The plan for ``alt_num_cus``, required to differ (in its works when split)."""
    alt = plan_persistent_decode(**{**kwargs, "num_cus": case.alt_num_cus})
    changes_works = not same_works(plan, alt)
    if plans_equal(plan, alt) or ("split" in features and not changes_works):
        what = "split layout" if "split" in features else "plan"
        raise _fail(
            case,
            f"the plan for alt_num_cus={case.alt_num_cus} does not change the {what}; the "
            f"plan-invariance check would compare the golden plan with itself",
        )
    return alt, changes_works


def build_golden(case: GoldenCase) -> GoldenData:
    """Generate and check one golden (see the module docstring); nothing is written."""
    problems = case.problems()
    if problems:
        raise _fail(case, "; ".join(problems))
    inputs = make_inputs(case)
    kwargs = planner_kwargs(case, inputs)
    plan = _checked_plan(case, inputs, kwargs)
    result, out_check, lse_check = _checked_result(case, inputs, plan)
    features = plan_features(case, kwargs, plan, result)
    missing = [f for f in case.expect if f not in features]
    if missing:
        raise _fail(case, f"the plan lacks the expected features {missing} (it shows {features})")
    alt, alt_changes_works = _checked_alt_plan(case, kwargs, plan, features)

    tensors: dict[str, torch.Tensor] = {
        "q": inputs.q,
        "kv_tokens": inputs.kv_tokens,
        "query_start_loc": inputs.query_start_loc,
        "seq_lens": inputs.seq_lens,
        "block_table": inputs.block_table,
        "kv_indptr": inputs.kv_indptr,
        "kv_indices": inputs.kv_indices,
        "kv_last_page_lens": inputs.kv_last_page_lens,
        **{f"plan.{name}": getattr(plan, name) for name in PLAN_BUFFERS},
        "out": result.out.to(torch.float32),
        "lse": result.lse.to(torch.float32),
    }
    meta: dict[str, Any] = {
        "generator_version": GENERATOR_VERSION,
        "case": case.to_json(),
        "num_blocks": inputs.num_blocks,
        "sm_scale": SM_SCALE,
        "q_scale": inputs.q_scale,
        "kv_scale": inputs.kv_scale,
        "plan": {
            **{key: int(getattr(plan, key)) for key in PLAN_SCALARS},
            "params": plan.params,
        },
        "planner_call": _json_call(kwargs),
    }
    provenance = {
        "generator_version": GENERATOR_VERSION,
        "features": features,
        "num_works": plan.num_works,
        "num_split_tiles": len(plan.split_tiles()),
        "alt_plan": {
            "num_cus": case.alt_num_cus,
            "num_works": alt.num_works,
            "num_split_tiles": len(alt.split_tiles()),
            "works_differ": alt_changes_works,
        },
        "vs_fp64_reference": {
            "out_max_abs_err": out_check.max_abs_err,
            "out_cos_diff": out_check.cos_diff,
            "out_bound_ratio": out_check.worst_ratio,
            "lse_max_abs_err": lse_check.max_abs_err,
        },
    }
    return GoldenData(case, tensors, meta, provenance)


# --------------------------------------------------------------------------------------
# Writing a set and reporting what changed


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def generator_provenance() -> dict[str, Any]:
    """The manifest's generator record (environment versions are informational)."""
    return {
        "name": "conformance.goldens",
        "version": GENERATOR_VERSION,
        "planner": "conformance.persistent.plan_persistent_decode (AITER v1.2 serial)",
        "result": "kernels.plan_exec.execute_plan (fp32, AITER fp8 semantics)",
        "checked_against": "kernels.reference.mla_decode_reference (fp64)",
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "safetensors": _package_version("safetensors"),
    }


# Two generations of one golden on different CPUs (other SIMD kernels, other summation
# order) agree to fp32 rounding only. A float buffer counts as unchanged when every element
# is within this bound of the committed one: the bf16-q generation bound against the fp64
# reference (`conformance.goldens.tolerance`), far below any backend tolerance.
REGENERATION_ATOL = 1e-5
REGENERATION_RTOL = 1e-5


def _describe_tensor(name: str, old: torch.Tensor, new: torch.Tensor) -> str | None:
    if old.dtype != new.dtype or old.shape != new.shape:
        return f"{name}: {old.dtype} {tuple(old.shape)} -> {new.dtype} {tuple(new.shape)}"
    if old.dtype.is_floating_point:
        a, b = old.to(torch.float64), new.to(torch.float64)
        nan_moved = int((torch.isnan(a) != torch.isnan(b)).sum())
        both = ~torch.isnan(a) & ~torch.isnan(b)
        same_inf = (a == b) | ~(torch.isinf(a) | torch.isinf(b))
        inf_moved = int((~same_inf & both).sum())
        finite = both & torch.isfinite(a) & torch.isfinite(b)
        delta = (a[finite] - b[finite]).abs()
        diff = float(delta.max()) if bool(finite.any()) else 0.0
        bound = REGENERATION_ATOL + REGENERATION_RTOL * a[finite].abs()
        if not nan_moved and not inf_moved and bool((delta <= bound).all()):
            return None  # fp32 rounding of another CPU's kernels, not a change
        extra = (
            f", {nan_moved} NaN and {inf_moved} inf position(s) moved"
            if (nan_moved or inf_moved)
            else ""
        )
        return f"{name}: max |diff| {diff:.3g}{extra}"
    if torch.equal(old, new):
        return None
    differ = old != new
    delta = int((old.to(torch.int64) - new.to(torch.int64)).abs().max())
    return f"{name}: {int(differ.sum())} of {old.numel()} entries differ (max |diff| {delta})"


def describe_changes(
    old: tuple[dict[str, torch.Tensor], dict[str, Any]],
    new: tuple[dict[str, torch.Tensor], dict[str, Any]],
) -> list[str]:
    """Per-buffer differences between two goldens' contents (empty when identical)."""
    (old_t, old_m), (new_t, new_m) = old, new
    lines = []
    for name in sorted(set(old_t) | set(new_t)):
        if name not in new_t:
            lines.append(f"{name}: removed")
        elif name not in old_t:
            lines.append(f"{name}: added")
        else:
            line = _describe_tensor(name, old_t[name], new_t[name])
            if line:
                lines.append(line)
    changed = []
    for key in sorted(set(old_m) | set(new_m)):
        a, b = old_m.get(key), new_m.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changed += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            changed.append(key)
    if changed:
        lines.append(f"metadata changed: {', '.join(changed)}")
    return lines


@dataclass
class SetReport:
    """What a generate or check run found, case by case."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        """True when anything was added, removed or changed."""
        return bool(self.added or self.removed or self.changed)

    def lines(self) -> list[str]:
        """Human-readable report lines."""
        out = [f"  added    {cid}" for cid in self.added]
        out += [f"  removed  {cid}" for cid in self.removed]
        for cid, details in self.changed.items():
            out.append(f"  changed  {cid}")
            out += [f"           {d}" for d in details]
        out.append(f"  unchanged: {len(self.unchanged)} case(s)")
        return out


@dataclass(frozen=True)
class _OldFile:
    """A stored golden read without its checksum check (for reporting changes)."""

    data: bytes | None = None
    content: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None
    error: str = ""


def _read_old(store: GoldenStore, entry: ManifestEntry | None, case_id: str) -> _OldFile:
    path = store.root / entry.file if entry else store.path_of(case_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return _OldFile(error=f"{path}: missing")
    try:
        return _OldFile(data=data, content=deserialize(data, path=path))
    except GoldenError as exc:
        return _OldFile(data=data, error=f"old file unreadable: {exc}")


def _compare(old: _OldFile, new_bytes: bytes, new_content: tuple) -> list[str] | None:
    """None when `old` holds `new_bytes` or the same content to fp32 rounding; else the change."""
    if old.content is None:
        return [old.error]
    if old.data == new_bytes:
        return None
    return describe_changes(old.content, new_content) or None


def _select(only: Sequence[str] | None) -> list[GoldenCase]:
    table = case_table()
    if not only:
        return list(table.values())
    unknown = [cid for cid in only if cid not in table]
    if unknown:
        raise GenerationError(f"--only: unknown case id(s) {unknown}; known: {', '.join(table)}")
    return [table[cid] for cid in table if cid in only]


def write_set(
    store: GoldenStore, cases: Sequence[GoldenCase], *, full: bool, echo: Callable[[str], None]
) -> SetReport:
    """Generate `cases` into `store`, update its manifest, and report against its old content.

    Every golden is built and checked before anything is written, so a refused golden
    leaves the store as it was. With `full` the set becomes exactly the case table (files
    of removed cases are deleted); otherwise the other cases' entries are kept as they are.
    """
    try:
        old_entries = store.read_manifest().entries
    except GoldenError:
        old_entries = {}
    built: dict[str, GoldenData] = {}
    for case in cases:
        echo(f"  generating {case.id}")
        built[case.id] = build_golden(case)
    report = SetReport()
    entries: dict[str, ManifestEntry] = {}
    for case_id in case_table():
        golden = built.get(case_id)
        if golden is None:
            if case_id in old_entries:
                entries[case_id] = old_entries[case_id]
            continue
        old = _read_old(store, old_entries.get(case_id), case_id)
        new_bytes = serialize(golden.tensors, golden.meta)
        if case_id in old_entries and old.data is not None:
            if _compare(old, new_bytes, (golden.tensors, golden.meta)) is None:
                entries[case_id] = old_entries[case_id]  # keep the committed bytes
                report.unchanged.append(case_id)
                continue
        entries[case_id] = store.write(
            case_id,
            golden.tensors,
            golden.meta,
            case=golden.case.to_json(),
            provenance=golden.provenance,
        )
        if case_id not in old_entries and old.data is None:
            report.added.append(case_id)
            continue
        change = _compare(old, new_bytes, (golden.tensors, golden.meta))
        if change is None:
            report.unchanged.append(case_id)
        else:
            report.changed[case_id] = change
    if full:
        gone = [cid for cid in old_entries if cid not in entries]
        store.remove(old_entries[cid].file for cid in gone)
        report.removed.extend(gone)
    store.write_manifest(Manifest(generator=generator_provenance(), entries=entries))
    return report


def check_set(
    store: GoldenStore, cases: Sequence[GoldenCase], *, full: bool, echo: Callable[[str], None]
) -> SetReport:
    """Regenerate `cases` into a temporary directory and compare them with `store`."""
    report = SetReport()
    try:
        committed = store.read_manifest().entries
    except GoldenError as exc:
        committed = {}
        echo(f"  {exc}")
    with tempfile.TemporaryDirectory() as tmp:
        fresh_store = GoldenStore(tmp)
        fresh = write_set(fresh_store, cases, full=True, echo=echo).added
        fresh_entries = fresh_store.read_manifest().entries
        for case_id in fresh:
            new_entry = fresh_entries[case_id]
            new_bytes = (fresh_store.root / new_entry.file).read_bytes()
            old_entry = committed.get(case_id)
            if old_entry is None:
                report.added.append(case_id)
                continue
            old = _read_old(store, old_entry, case_id)
            if old.data is not None and sha256_bytes(old.data) != old_entry.sha256:
                path = store.root / old_entry.file
                change: list[str] | None = [f"{path}: sha256 differs from the manifest's"]
            else:
                change = _compare(old, new_bytes, deserialize(new_bytes, path=tmp))
            if change is None and old_entry.case != new_entry.case:
                change = ["manifest: case parameters differ"]
            if change is None:
                report.unchanged.append(case_id)
            else:
                report.changed[case_id] = change
    if full:
        report.removed.extend(cid for cid in committed if cid not in case_table())
        listed = {e.file for e in committed.values()}
        stray = sorted(p.name for p in store.root.glob("*.safetensors") if p.name not in listed)
        report.removed.extend(f"{name} (file not in the manifest)" for name in stray)
    return report


def generate(
    root: Path | str | None = None,
    *,
    only: Sequence[str] | None = None,
    check: bool = False,
    echo: Callable[[str], None] = print,
) -> int:
    """Regenerate (or, with `check`, verify) the golden set; returns an exit status.

    0: written (or, with `check`, identical); 1: `check` found differences, or a golden
    failed its checks (nothing is written for it).
    """
    store = GoldenStore(root)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # fixed reduction order: byte-stable output on one machine
    try:
        cases = _select(only)
        mode = "checking" if check else "generating"
        echo(f"goldens: {mode} {len(cases)} case(s) in {store.root}")
        if check:
            report = check_set(store, cases, full=not only, echo=echo)
        else:
            report = write_set(store, cases, full=not only, echo=echo)
    except GenerationError as exc:
        echo(f"goldens: FAILED: {exc}")
        return 1
    finally:
        torch.set_num_threads(threads)
    for line in report.lines():
        echo(line)
    if check and report.differs:
        echo("goldens: the committed goldens differ from a fresh generation (see above)")
        return 1
    echo("goldens: ok" if check else f"goldens: manifest written to {store.manifest_path}")
    return 0
