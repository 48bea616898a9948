"""Decode benchmark of the suite's Triton persistent MLA decode, against the roofline and peers.

``python -m benchmarks.bench_decode [--quick] [--tune] [--ablate] [--out DIR]`` (CUDA
needed; without a CUDA device it says so and exits 0 having run nothing). In one run it:

1. compiles the Triton kernels in parallel processes (`benchmarks.decode.precompile`) while
   FlashInfer, when it imports, JIT-compiles its MLA modules here;
2. measures the device's ceilings: a 2 GiB device-to-device copy and an 8192³ bf16 and e4m3
   matmul (`benchmarks.roofline.measure_ceilings`; an e4m3-q case also gets its floor at the
   e4m3 rate);
3. optionally (``--tune``) times candidate tile configurations and uses the fastest;
4. for every case (`benchmarks.decode.cases`: ``--quick`` is the side-by-side table) checks
   and times ours and each peer on the same inputs (`benchmarks.decode.record`): ours
   (`kernels.triton_mla.persistent_mla_decode`, planned as the backend plans), FlashInfer's
   ``BatchMLAPagedAttentionWrapper`` fa3 and fa2 (`benchmarks.decode.flashinfer_peer`),
   DeepSeek's FlashMLA (`benchmarks.decode.flashmla_peer`), the
   classic two-stage split-KV decode and torch's SDPA (`benchmarks.decode.impls`);
5. writes ``<date>-<gpu>.json`` and ``.md`` under ``--out`` after every case (``-2``, ``-3``, ...
   where an earlier run's files have that name: none is overwritten)
   (`benchmarks.decode.report`): µs, % of the floor, ours ÷ peer, errors.

Timing (`benchmarks.decode.timing`): medians of CUDA-graph replays, L2 flushed before each.
Exit status 1 when an implementation's output failed its check (marked WRONG), else 0.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IMPLS = ("triton", "flashmla", "flashinfer_fa3", "flashinfer_fa2", "baseline", "sdpa")
NO_CUDA_MESSAGE = (
    "the decode benchmark needs a CUDA device: torch {version} sees none here; nothing was run"
)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_decode", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="the side-by-side table only")
    parser.add_argument("--tune", action="store_true", help="time candidate configs first")
    parser.add_argument(
        "--tune-only", default="", help="tune these config keys only (implies --tune), e.g. 64-bf16"
    )
    parser.add_argument("--ablate", action="store_true", help="128-head timing probes")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    parser.add_argument(
        "--impls", default=",".join(IMPLS), help="comma-separated, of " + ", ".join(IMPLS)
    )
    parser.add_argument("--budget-ms", type=float, default=25.0, help="timing budget per call")
    parser.add_argument("--workers", type=int, default=8, help="parallel compile processes")
    args = parser.parse_args(argv)
    args.impls = [i for i in args.impls.split(",") if i]
    from benchmarks.decode.cases import TUNE_CANDIDATES

    tune_known = {f"{k[0]}-{k[1]}" for k in TUNE_CANDIDATES}
    bad_keys = sorted({k for k in args.tune_only.split(",") if k} - tune_known)
    if bad_keys:
        parser.error(f"--tune-only: unknown {', '.join(bad_keys)} (known: {sorted(tune_known)})")
    args.tune = args.tune or bool(args.tune_only)
    unknown = sorted(set(args.impls) - set(IMPLS))
    if unknown:
        parser.error(f"--impls: unknown {', '.join(unknown)} (known: {', '.join(IMPLS)})")
    return args


def _flashinfer(impls: list[str]) -> tuple[Any, dict[str, Any]]:
    """(the FlashInfer peer or None, its status for the payload)."""
    if not any(i.startswith("flashinfer") for i in impls):
        return None, {"available": False, "reason": "not requested (--impls)"}
    from benchmarks.decode.flashinfer_peer import FlashInferPeer, load

    mla, version = load()
    if mla is None:
        return None, {"available": False, "reason": version}
    return FlashInferPeer(mla, version, "cuda"), {"available": True, "version": version}


def _flashmla(impls: list[str]) -> tuple[Any, dict[str, Any]]:
    """(the FlashMLA peer or None, its status for the payload)."""
    if "flashmla" not in impls:
        return None, {"available": False, "reason": "not requested (--impls)"}
    from benchmarks.decode.flashmla_peer import FlashMLAPeer, load

    ops, source = load()
    if ops is None:
        return None, {"available": False, "reason": source}
    return FlashMLAPeer(ops, source), {"available": True, "source": source}


def _command(argv: Sequence[str]) -> str:
    """The command line as recorded: the output folder named ``OUT`` (no machine path)."""
    words = [("--out=OUT" if w.startswith("--out=") else w) for w in argv]
    words = ["OUT" if i and words[i - 1] == "--out" else w for i, w in enumerate(words)]
    return " ".join(["python -m benchmarks.bench_decode", *words])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    args = _parse(argv)
    import torch

    if not torch.cuda.is_available():
        print(NO_CUDA_MESSAGE.format(version=torch.__version__))
        return 0
    sys.path.insert(0, str(ROOT))
    from benchmarks.decode import cases as cs
    from benchmarks.decode import report
    from benchmarks.decode.precompile import compile_jobs, precompile
    from benchmarks.decode.record import run_case
    from benchmarks.decode.timing import Timer
    from benchmarks.decode.tuning import ablate, tune
    from benchmarks.roofline import measure_ceilings
    from kernels import triton_mla as tm

    started = time.perf_counter()
    cases = cs.quick_grid() if args.quick else cs.full_grid()
    if args.only:
        wanted = [w for w in args.only.split(",") if w]
        cases = [c for c in cases if any(w in c.name for w in wanted)]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    only_keys = {k for k in args.tune_only.split(",") if k}
    tune_keys = [
        k
        for k in cs.TUNE_CANDIDATES
        if args.tune and (not only_keys or f"{k[0]}-{k[1]}" in only_keys)
    ]
    extra = [c for k in tune_keys for c in cs.TUNE_SHAPES[k]]
    extra += cs.ABLATION_SHAPES if args.ablate else []
    peer, fi_status = _flashinfer(args.impls)
    flashmla, fm_status = _flashmla(args.impls)
    print(f"flashmla: {fm_status}", flush=True)
    kv_formats = {c.kv_format for c in cases}
    warm = precompile(
        compile_jobs(cases + extra, tuning=args.tune),
        args.workers,
        meanwhile=(lambda: peer.warm_up(kv_formats, "cuda")) if peer else None,
    )
    if peer:
        fi_status["warm_up"] = warm
        fi_status["ready_after_s"] = round(time.perf_counter() - started, 1)
    print(f"flashinfer: {fi_status}", flush=True)

    env = report.environment() | {"flashinfer": fi_status.get("version", "not timed")}
    print(json.dumps(env), flush=True)
    ceilings, raw = measure_ceilings()
    print(
        f"ceilings: copy {ceilings.copy_bytes_per_s / 1e12:.2f} TB/s, "
        f"matmul {ceilings.matmul_flops_per_s / 1e12:.0f} TFLOP/s",
        flush=True,
    )
    timer = Timer(budget_ms=args.budget_ms)
    payload: dict[str, Any] = {
        "date": _dt.date.today().isoformat(),
        "command": _command(argv or sys.argv[1:]),
        "environment": env,
        "ceilings": ceilings.as_dict() | raw,
        "flashinfer": fi_status,
        "flashmla": fm_status,
        "page_size": cs.PAGE_SIZE,
        "planner": {"arch": "triton", "profile_default_granularity": True, "num_cus": num_sms},
        "timing": "CUDA graph replay, L2 flushed (256 MiB read) before each replay, median",
        "cases": [],
    }
    paths = report.report_paths(args.out, payload)  # never another run's files
    if args.tune:
        payload["tuning"] = tune(timer=timer, num_sms=num_sms, keys=tune_keys)
    payload["decode_configs"] = {
        f"{k[0]}-{k[1]}": {**v, **cs.LAUNCH_OPTIONS.get(k, {})}
        for k, v in tm.DECODE_CONFIGS.items()
    }
    payload["hopper_configs"] = {  # the Gluon kernel's, used over decode_configs on sm_90
        f"{k[0]}-{k[1]}": {**v, **cs.LAUNCH_OPTIONS.get(k, {})}
        for k, v in tm.HOPPER_CONFIGS.items()
    }
    payload["ws_configs"] = {"configs": tm.WS_CONFIGS, "by_default": list(tm.WS_BY_DEFAULT)}
    if args.ablate:
        payload["ablation"] = ablate(timer=timer, num_sms=num_sms)
    for case in cases:
        try:
            record = run_case(
                case, ceilings=ceilings, timer=timer, num_sms=num_sms, impls=args.impls,
                flashinfer=peer, flashmla=flashmla,
            )  # fmt: skip
        except Exception as exc:  # record and go on: one broken case must not lose the run
            record = {"case": case.name, "skipped": f"error {type(exc).__name__}: {exc}"[:300]}
            torch.cuda.empty_cache()
        payload["cases"].append(record)
        summary = " | ".join(
            f"{k} {report.fmt_us(record[k])}" for k in IMPLS if isinstance(record.get(k), dict)
        )
        print(f"{case.name}: {summary} [{time.perf_counter() - started:.0f} s]", flush=True)
        report.write_reports(paths, payload)  # after every case: a killed run keeps its results
    payload["wall_s"] = time.perf_counter() - started
    json_path, md_path = report.write_reports(paths, payload)
    print(report.comparison_table(payload["cases"]))
    problems = report.problems(payload["cases"])
    for line in problems:
        print(f"  {line}")
    print(f"wrote {json_path} and {md_path} ({payload['wall_s']:.0f} s)")
    return 1 if any(" wrong: " in line for line in problems) else 0


if __name__ == "__main__":
    sys.exit(main())
