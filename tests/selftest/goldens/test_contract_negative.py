"""Negative controls of the numerics and plan contracts: broken builders, planners,
reduces, decodes and goldens.

Each runs the real contract modules (tests/conformance/test_numerics.py, test_plan.py)
in-process against one deliberately broken piece and requires the run to fail on the
cases that exercise it, naming the case and the field (and to pass where the piece is not
used).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from backends import common, registry
from backends.base import DecodeScales, MetadataBuilder
from backends.cpu import CpuReferenceBackend, CpuReferenceBuilder
from conformance.goldens import GOLDENS_ENV, GoldenStore
from conformance.metadata.record import CommonAttentionMetadata
from conformance.persistent import planner
from conformance.persistent.plan import WorkInfo, WorkPlan
from kernels import plan_exec

pytestmark = pytest.mark.selftest

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
CONTRACTS = (CONFORMANCE / "test_numerics.py", CONFORMANCE / "test_plan.py")
ID_46997 = (
    "gfx950-h32-bf16q-fp8kv-q1-p1-cu256-vllm46997",
    "gfx950-h32-fp8-q2-p1-cu256-vllm46997",
)
KV_LT_Q = "gfx942-h16-bf16q-fp8kv-q4-p2-cu80-kv-lt-q"


def run_family_c(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run both contracts in-process against the current (patched) implementation."""
    paths = [str(p) for p in CONTRACTS]
    return pytester.runpytest_inprocess(*paths, "-p", "no:cacheprovider", "-rf", *args)


def failed_cases(result: pytest.RunResult, test: str) -> set[str]:
    """Case ids of the failed parametrizations of `test`."""
    pattern = re.compile(rf"^FAILED .*::{test}\[([^\]]+)\]")
    return {m.group(1) for line in result.outlines if (m := pattern.match(line))}


def cases_with(feature: str, *, builder_only: bool = True) -> set[str]:
    """Ids of the committed cases whose generation recorded `feature`."""
    manifest = GoldenStore().read_manifest()
    return {
        cid
        for cid, entry in manifest.entries.items()
        if feature in entry.provenance.get("features", [])
        and (entry.case["via_builder"] or not builder_only)
    }


def use_backend(monkeypatch: pytest.MonkeyPatch, backend: CpuReferenceBackend) -> None:
    """Make `registry.get_backend(backend.name)` return `backend`."""
    real = registry.get_backend
    monkeypatch.setattr(
        registry, "get_backend", lambda name: backend if name == backend.name else real(name)
    )


def k_cases(test: str, case_ids: Iterable[str]) -> str:
    """A ``-k`` expression selecting `test` on the given cases."""
    return f"{test} and ({' or '.join(case_ids)})"


# --------------------------------------------------------------------------------------
# vLLM #46997: a builder that plans an fp8 run as bf16


class PlansFp8AsBf16Builder(CpuReferenceBuilder):
    """BROKEN (#46997): the planner call passes bf16 dtypes whatever the run's dtypes."""

    def _planner_call(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        call = super()._planner_call(*args, **kwargs)
        return {**call, "q_dtype": torch.bfloat16, "kv_dtype": torch.bfloat16}


def backend_building_with(name: str, builder: type[MetadataBuilder]) -> CpuReferenceBackend:
    """The CPU reference backend, renamed, with another builder."""
    attrs = {"name": name, "builder_cls": lambda self: builder}
    return type(f"Backend_{builder.__name__}", (CpuReferenceBackend,), attrs)()


PlansFp8AsBf16Backend = backend_building_with("plans-fp8-as-bf16", PlansFp8AsBf16Builder)


def test_builder_planning_fp8_as_bf16_is_caught(pytester, monkeypatch):
    use_backend(monkeypatch, PlansFp8AsBf16Backend)
    result = run_family_c(
        pytester,
        "--backend",
        PlansFp8AsBf16Backend.name,
        "-k",
        "planner_call_replays or plan_matches_golden",
    )
    expected = cases_with("bf16-plan-differs")
    assert set(ID_46997) <= expected, "the #46997 goldens must plan differently as bf16"
    assert failed_cases(result, "test_planner_call_replays_with_fp8_dtypes") == expected
    assert failed_cases(result, "test_plan_matches_golden") == expected
    assert result.parseoutcomes().get("passed", 0) > 0  # bf16 and unaffected cases pass
    result.stdout.fnmatch_lines(
        [
            f"*case {ID_46997[0]}: the backend's plan differs from the golden plan*",
            f"*case {ID_46997[0]}: the builder's plan (planner called with *bfloat16*) "
            f"differs from the replay with the run's dtypes*",
        ],
        consecutive=False,
    )


# --------------------------------------------------------------------------------------
# AITER #2106: a planner without the tail rule


def planner_without_tail_rule(*args: Any, **kwargs: Any) -> Any:
    """BROKEN (#2106): AITER's walk with the short-tail absorption removed."""
    return planner.plan_with_walk(*args, **kwargs, walk="literal", tail_rule=False)


def test_planner_without_tail_rule_is_caught(pytester, monkeypatch):
    monkeypatch.setattr(common, "plan_persistent_decode", planner_without_tail_rule)
    result = run_family_c(pytester, "-k", "plan_matches_golden")
    expected = cases_with("tail-rule")
    assert expected, "some golden must exercise the tail rule"
    assert failed_cases(result, "test_plan_matches_golden") == expected
    result.stdout.fnmatch_lines(
        ["*the backend's plan differs from the golden plan*", "*work_info_set*"]
    )


# --------------------------------------------------------------------------------------
# A reduce without the -inf guard


def groups_merged_by(merge):
    """A reduce that merges each split group's ``(O_k, lse_k)`` stacks with `merge`."""

    def reduce(
        partial_out, partial_lse, *, reduce_indptr, reduce_final_map, reduce_partial_map, out, lse
    ):
        ind, pmap = reduce_indptr.tolist(), reduce_partial_map.tolist()
        for tile in range(len(ind) - 1):
            if ind[tile + 1] - ind[tile] < 2:
                continue
            q0, q1 = reduce_final_map[tile].tolist()
            locs = pmap[ind[tile] : ind[tile + 1]]
            o_k = torch.stack([partial_out[loc : loc + q1 - q0] for loc in locs])
            lse_k = torch.stack([partial_lse[loc : loc + q1 - q0] for loc in locs])
            out[q0:q1], lse[q0:q1] = merge(o_k, lse_k)
        return out, lse

    return reduce


def _unguarded_merge(o_k: torch.Tensor, lse_k: torch.Tensor):
    """BROKEN: raw ``exp(lse - max)`` weights; NaN when every split is -inf."""
    top = lse_k.max(dim=0).values
    weight = torch.exp(lse_k - top)
    total = weight.sum(dim=0)
    return (weight[..., None] * o_k).sum(dim=0) / total[..., None], top + torch.log(total)


unguarded_reduce = groups_merged_by(_unguarded_merge)


def test_reduce_without_neg_inf_guard_is_caught(pytester, monkeypatch):
    assert KV_LT_Q in cases_with("all-neg-inf-group", builder_only=False)
    masked = "gfx942-h16-fp8-q4-p16-cu80-masked-split"  # masked rows, no all -inf row
    monkeypatch.setattr(plan_exec, "reduce_partials", unguarded_reduce)
    result = run_family_c(
        pytester, "-k", "(decode_matches_golden or poisoned_slots) and (kv-lt-q or masked-split)"
    )
    assert failed_cases(result, "test_decode_matches_golden") == {KV_LT_Q}
    assert failed_cases(result, "test_poisoned_slots_never_reach_the_output") == {KV_LT_Q}
    assert result.parseoutcomes().get("passed", 0) == 2, masked  # the masked-split case
    result.stdout.fnmatch_lines(
        [f"*{KV_LT_Q} decode (golden metadata fed) out: MISMATCH*", "*NaN/Inf positions differ*"]
    )


# --------------------------------------------------------------------------------------
# A decode that ignores the kv scale


class IgnoresKvScaleBackend(CpuReferenceBackend):
    """BROKEN: decodes as if the cache's per-tensor scale were 1."""

    name: ClassVar[str] = "ignores-kv-scale"

    def decode_scaled(self, q, kv_cache, decode, scales: DecodeScales):
        unscaled = DecodeScales(scales.sm_scale, scales.q_scale, 1.0)
        return super().decode_scaled(q, kv_cache, decode, unscaled)


def test_decode_ignoring_the_kv_scale_is_caught(pytester, monkeypatch):
    use_backend(monkeypatch, IgnoresKvScaleBackend())
    fp8_kv = "tiny-gfx942-h16-bf16q-fp8kv-q1-p1-cu80"
    bf16_kv = "tiny-gfx942-h32-bf16-q2-p64-cu304"
    result = run_family_c(
        pytester,
        "--backend",
        IgnoresKvScaleBackend.name,
        "-k",
        k_cases("decode_matches_golden", (fp8_kv, bf16_kv)),
    )
    assert failed_cases(result, "test_decode_matches_golden") == {fp8_kv}
    assert result.parseoutcomes().get("passed", 0) == 1  # a bf16 cache has scale 1
    result.stdout.fnmatch_lines([f"*{fp8_kv} decode (own metadata) out: MISMATCH*"])


# --------------------------------------------------------------------------------------
# A decode that reads past the sequence end


_real_gather = plan_exec.gather_csr_kv


def gather_whole_pages(cache: torch.Tensor, *, end: int, page_size: int, **kwargs: Any):
    """BROKEN: loads whole pages (past the sequence end) and relies on the score mask."""
    return _real_gather(cache, end=-(-end // page_size) * page_size, page_size=page_size, **kwargs)


def test_decode_reading_past_the_sequence_end_is_caught(pytester, monkeypatch):
    monkeypatch.setattr(plan_exec, "gather_csr_kv", gather_whole_pages)
    partial_page = "gfx942-h16-fp8-q4-p16-cu80-masked-split"  # last pages of 1 and 8 tokens
    page_one = "tiny-gfx942-h16-bf16q-fp8kv-q1-p1-cu80"  # page size 1: no partial page
    result = run_family_c(
        pytester, "-k", k_cases("poisoned_slots_never_reach", (partial_page, page_one))
    )
    assert failed_cases(result, "test_poisoned_slots_never_reach_the_output") == {partial_page}
    result.stdout.fnmatch_lines([f"*{partial_page}: the output has * NaN entries*poisoned*"])


# --------------------------------------------------------------------------------------
# A reduce that is right only when nothing is split: the plan-invariance check


equal_weight_reduce = groups_merged_by(
    # BROKEN: averages the splits' outputs instead of weighting them by their LSE
    lambda o_k, lse_k: (o_k.mean(0), torch.logsumexp(lse_k, dim=0))
)


def test_plan_dependent_decode_is_caught_by_plan_invariance(pytester, monkeypatch):
    # gfx942, 48 heads, bf16 q: the golden plan (80 CUs) and the 304-CU plan both split;
    # 64 heads, page 64: the golden plan splits nothing, the other plan neither.
    split = "gfx942-h48-bf16q-fp8kv-q2-p1-cu80"
    unsplit = "gfx950-h48-fp8-q1-p64-cu256"
    monkeypatch.setattr(plan_exec, "reduce_partials", equal_weight_reduce)
    result = run_family_c(pytester, "-k", k_cases("decode_is_plan_invariant", (split, unsplit)))
    assert failed_cases(result, "test_decode_is_plan_invariant") == {split}
    result.stdout.fnmatch_lines([f"*{split} decode planned for 304 CUs out: MISMATCH*"])


# --------------------------------------------------------------------------------------
# A corrupted golden file


def test_corrupted_golden_fails_with_its_path(pytester, monkeypatch, tmp_path):
    copy = tmp_path / "goldens"
    shutil.copytree(GoldenStore().root, copy)
    case_id = "tiny-gfx942-h16-bf16q-fp8kv-q1-p1-cu80"
    entry = json.loads((copy / "manifest.json").read_text())["cases"][case_id]
    path = copy / entry["file"]
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01  # one bit of the output tensor
    path.write_bytes(bytes(data))
    monkeypatch.setenv(GOLDENS_ENV, str(copy))
    result = run_family_c(pytester, "-k", f"goldens_are_intact or {case_id}")
    outcomes = result.parseoutcomes()
    assert failed_cases(result, "test_decode_matches_golden") == {case_id}
    assert outcomes.get("failed", 0) >= 3, outcomes  # intact, decode, poison, plan, ...
    result.stdout.fnmatch_lines(["FAILED *test_goldens_are_intact*"])
    result.stdout.fnmatch_lines([f"*{path}: sha256 * does not match the manifest's*"])


# --------------------------------------------------------------------------------------
# Mutation holes: tiles of unequal rows, a builder that drops cam.causal


UNEVEN = "triton-h32-bf16q-fp8kv-q3-p16-cu132-uneven"
NON_CAUSAL = "tiny-gfx950-h16-bf16q-fp8kv-q4-p16-cu256-noncausal"
LOC = WorkInfo._fields.index("partial_qo_loc")


def planner_advancing_by_actual_rows(*args: Any, **kwargs: Any) -> WorkPlan:
    """BROKEN: ``partial_qo_loc`` advances by each split work's actual rows, not by the
    nominal tile size (the same whenever every tile has the same rows)."""
    plan = planner.plan_persistent_decode(*args, **kwargs)
    works = plan.work_info_set
    cursor = 0
    for w in range(plan.num_works):
        if int(works[w, LOC]) >= 0:
            works[w, LOC] = cursor
            cursor += int(works[w, 3] - works[w, 2])
    return plan


def test_partial_loc_by_actual_tile_rows_is_caught(pytester, monkeypatch):
    monkeypatch.setattr(common, "plan_persistent_decode", planner_advancing_by_actual_rows)
    result = run_family_c(pytester, "-k", "plan_matches_golden")
    assert UNEVEN in failed_cases(result, "test_plan_matches_golden")
    result.stdout.fnmatch_lines([f"*case {UNEVEN}: the backend's plan differs*", "*work_info_set*"])


class DropsCausalBuilder(CpuReferenceBuilder):
    """BROKEN: builds every decode causal, whatever ``cam.causal`` says."""

    def _build_decode(self, cam: CommonAttentionMetadata):
        return super()._build_decode(cam.replace(causal=True))


DropsCausalBackend = backend_building_with("drops-causal", DropsCausalBuilder)


def test_builder_dropping_cam_causal_is_caught(pytester, monkeypatch):
    use_backend(monkeypatch, DropsCausalBackend)
    result = run_family_c(pytester, "--backend", DropsCausalBackend.name, "-k", "decode_matches")
    assert failed_cases(result, "test_decode_matches_golden") == {NON_CAUSAL}
    result.stdout.fnmatch_lines([f"*{NON_CAUSAL} decode (own metadata) out: MISMATCH*"])
