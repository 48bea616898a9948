"""One case: check every implementation's output, time it, compare it with ours.

Each implementation's output is checked on the first and last request against an fp32
reference (`benchmarks.decode.inputs.reference_rows`), and every peer's whole output against
ours. A result whose error exceeds `WRONG_FRACTION` of the reference's largest magnitude, or
that holds a NaN, is marked ``wrong`` (with the reason) and gets no ratio: a timing of a call
with a wrong page table, head order or scale cannot pass as a comparison. The bound leaves
room for e4m3-rounded P (ours at fp8 measured ≈ 8 % of the largest output); a wrong page,
head or scale moves the output by its own size.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.decode import impls as im
from benchmarks.decode.cases import LAUNCH_OPTIONS, Case, config_key
from benchmarks.decode.inputs import Batch, make_batch, reference_rows
from benchmarks.decode.timing import Timer

WRONG_FRACTION = 0.25
REF_REQUESTS = 2  # requests checked against the fp32 reference (first and last)
OURS = "triton"
PEERS = ("flashmla", "flashinfer_fa3", "flashinfer_fa2", "baseline", "sdpa")
FASTEST_PEERS = ("flashmla", "flashinfer_fa3")
"""The production peers the speed goal is judged against: ours ÷ min(FlashMLA, fa3)."""
PLAN_FACTS = ("num_works", "num_partials", "heads_per_work", "fold_ratio")


def _max_abs(diff: Any) -> float:
    return float(diff.abs().nan_to_num(float("inf")).max())


def errors(out: Any, lse: Any, rows: Any, ref_out: Any, ref_lse: Any) -> dict[str, Any]:
    """Largest output and LSE errors on the reference rows, and whether any output is NaN."""
    import torch

    return {
        "max_abs_err": _max_abs(out[rows].float() - ref_out),
        "max_lse_err": float("nan") if lse is None else _max_abs(lse[rows].float() - ref_lse),
        "nan_anywhere": bool(torch.isnan(out.float()).any()),
    }


def wrong_reason(result: dict[str, Any], ref_max_abs: float) -> str | None:
    """Why a checked result is wrong, or None (see the module docstring)."""
    bound = WRONG_FRACTION * ref_max_abs
    if result["nan_anywhere"]:
        return "NaN in the output"
    if not result["max_abs_err"] <= bound:
        return f"max error {result['max_abs_err']:.2e} vs the fp32 reference > {bound:.2e}"
    if not result.get("max_diff_vs_ours", 0.0) <= bound:
        return f"max difference {result['max_diff_vs_ours']:.2e} from ours > {bound:.2e}"
    return None


def _sync(batch: Batch) -> None:
    import torch

    if batch.q.is_cuda:
        torch.cuda.synchronize()


def _floor_record(shape: Any, ceilings: Any) -> dict[str, Any]:
    from benchmarks.roofline import floor

    f = floor(shape, ceilings)
    return {
        "us": f.seconds * 1e6,
        "memory_us": f.memory_s * 1e6,
        "compute_us": f.compute_s * 1e6,
        "bound": f.bound,
        "flops": shape.flops,
        "bytes": shape.min_bytes,
    }


def _planned(
    batch: Batch, num_sms: int, plan_heads: int | None, device: str
) -> tuple[Any, dict[str, Any]]:
    """The plan ours runs, and its facts (plan time: median of three, CPU)."""

    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        plan = im.plan_for(batch, num_sms, device, plan_heads=plan_heads)
        _sync(batch)
        times.append((time.perf_counter() - t0) * 1e3)
    facts = {k: getattr(plan, k) for k in PLAN_FACTS}
    facts |= {"ms": statistics.median(times), "num_cus": num_sms}
    return plan, facts | {"planned_heads": plan_heads or batch.case.heads}


def run_case(
    case: Case,
    *,
    ceilings: Any,
    timer: Timer,
    num_sms: int,
    impls: Sequence[str],
    flashinfer: Any = None,
    flashmla: Any = None,
    device: str = "cuda",
) -> dict[str, Any]:
    """Check and time every implementation on one case; a record for the JSON file.

    `flashinfer` is a `benchmarks.decode.flashinfer_peer.FlashInferPeer`, or None when
    FlashInfer does not import (its entries are then left out); `flashmla` likewise a
    `benchmarks.decode.flashmla_peer.FlashMLAPeer` or None. `device` other than
    ``"cuda"`` serves the selftests (the kernels under Triton's interpreter, a stand-in timer).
    """
    import torch

    from benchmarks.roofline import DecodeShape, achieved

    shape = DecodeShape(
        batch=case.batch, heads=case.heads, context=case.context, q_len=case.q_len,
        kv_format=case.kv_format, q_format=case.kv_format,
    )  # fmt: skip
    fp8_rate = case.kv_format == "fp8" and ceilings.fp8_matmul_flops_per_s is not None
    record: dict[str, Any] = {"case": case.name, **dataclasses.asdict(case)}
    record["floor"] = _floor_record(shape, ceilings)
    if fp8_rate:  # the e4m3-q case's floor at the fp8 MMA rate measured in the run
        record["floor_fp8_rate"] = _floor_record(shape, ceilings.at_fp8_rate())
    batch = make_batch(case, device)
    rows, ref_out, ref_lse = reference_rows(batch, sorted({0, case.batch - 1})[:REF_REQUESTS])
    ref_max = record["ref_max_abs"] = float(ref_out.abs().max())
    ours_out = None

    def measure(impl: im.Impl) -> tuple[dict[str, Any], Any]:
        out, lse = impl.outputs(impl.run())
        _sync(batch)
        result = dict(impl.info) | errors(out, lse, rows, ref_out, ref_lse)
        if ours_out is not None:
            result["max_diff_vs_ours"] = _max_abs(out.float() - ours_out.float())
        if (reason := wrong_reason(result, ref_max)) is not None:
            result["wrong"] = reason
        result |= timer(impl.run)
        result |= achieved(shape, ceilings, result["us"] * 1e-6)
        if fp8_rate:
            at_fp8 = achieved(shape, ceilings.at_fp8_rate(), result["us"] * 1e-6)
            result["fraction_of_fp8_rate_floor"] = at_fp8["fraction_of_floor"]
        return result, out

    plan_heads = LAUNCH_OPTIONS.get(config_key(case), {}).get("PLAN_HEADS")
    factories: dict[str, Callable[[], im.Impl]] = {
        "baseline": lambda: im.baseline_impl(batch, num_sms),
        "sdpa": lambda: im.sdpa_impl(batch),
    }
    if flashmla is not None:
        factories["flashmla"] = lambda: flashmla.impl(batch)
    if flashinfer is not None:
        factories["flashinfer_fa3"] = lambda: flashinfer.impl(batch, "fa3")
        factories["flashinfer_fa2"] = lambda: flashinfer.impl(batch, "fa2")
    if OURS in impls:
        plan, record["plan"] = _planned(batch, num_sms, plan_heads, device)
        record[OURS], ours_out = measure(im.triton_impl(batch, plan))
        if plan_heads:  # also the plan the backend makes (all heads, folded): for comparison
            folded, _ = _planned(batch, num_sms, None, device)
            record["triton_folded_plan"] = measure(im.triton_impl(batch, folded))[0]
    for name in (p for p in PEERS if p in impls and p in factories):
        try:
            record[name] = measure(factories[name]())[0]
        except torch.cuda.OutOfMemoryError as exc:
            record[name] = {"skipped": f"out of memory: {str(exc).splitlines()[0]}"}
        except Exception as exc:  # a peer that rejects the case: recorded, the run goes on
            record[name] = {"skipped": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            torch.cuda.empty_cache()
        ours, peer = record.get(OURS, {}), record[name]
        if "us" in ours and "us" in peer and "wrong" not in ours and "wrong" not in peer:
            record[f"ours_over_{name}"] = ours["us"] / peer["us"]
    timed = [record.get(k, {}) for k in FASTEST_PEERS]
    fastest = [entry["us"] for entry in timed if "us" in entry and "wrong" not in entry]
    if fastest and "us" in record.get(OURS, {}) and "wrong" not in record[OURS]:
        record["ours_over_fastest_peer"] = record[OURS]["us"] / min(fastest)
    batch = factories = None  # the closures hold the inputs: release them before emptying
    torch.cuda.empty_cache()
    return record
