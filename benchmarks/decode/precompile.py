"""Parallel compilation of the Triton kernels a run will launch (spawned processes).

Each job runs a tiny case once so Triton compiles, and caches on disk, the kernels of one
(heads, q_len, KV format, config); the run then finds them in the shared cache. Work given as
`meanwhile` (FlashInfer's JIT) runs in this process while the pool compiles.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.decode.cases import TUNE_CANDIDATES, Case, config_key, split_launch
from benchmarks.decode.impls import baseline_impl, plan_for, triton_impl
from benchmarks.decode.inputs import make_batch

Job = tuple[int, int, str, dict[str, int] | None, bool]


def compile_job(job: Job) -> str:
    """Worker: run a tiny case once so Triton compiles (and caches) the kernels of `job`."""
    heads, q_len, kv_format, config, with_baseline = job
    import torch

    torch.cuda.set_device(0)
    case = Case(heads, kv_format, 2, 300, q_len)
    batch = make_batch(case, "cuda")
    kernel_cfg, plan_heads = split_launch(config)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan = plan_for(batch, sms, plan_heads=plan_heads)
    try:
        triton_impl(batch, plan, kernel_cfg).run()
        if with_baseline:
            baseline_impl(batch, 132).run()
        torch.cuda.synchronize()
        return "ok"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:120]}"


def precompile(jobs: list[Job], workers: int, meanwhile: Callable[[], Any] | None = None) -> Any:
    """Compile `jobs` in `workers` processes, running `meanwhile` here; its result."""
    if workers <= 1 or not jobs:
        return meanwhile() if meanwhile else None
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    result = None
    try:
        with ctx.Pool(min(workers, len(jobs))) as pool:
            pending = pool.map_async(compile_job, jobs, chunksize=1)
            result = meanwhile() if meanwhile else None
            results = pending.get(timeout=300)
    except Exception as exc:  # compilation then happens on first use
        print(f"precompile failed ({type(exc).__name__}: {exc}); compiling on first use")
        return result
    failed = [(j, r) for j, r in zip(jobs, results, strict=True) if r != "ok"]
    print(f"precompiled {len(jobs)} kernel sets in {time.perf_counter() - t0:.0f} s", flush=True)
    for job, outcome in failed:
        print(f"  precompile {job}: {outcome}")
    return result


def compile_jobs(cases: Sequence[Case], *, tuning: bool) -> list[Job]:
    """One job per distinct (heads, q_len, KV format, config) the run will launch."""
    jobs: dict[Any, Any] = {}
    for c in cases:
        block_m = config_key(c)[0]
        key = (c.heads, c.q_len, c.kv_format)
        jobs.setdefault((key, None), (*key, None, True))
        if tuning:
            for cfg in TUNE_CANDIDATES.get((block_m, c.kv_format), []):
                frozen = tuple(sorted(cfg.items()))
                jobs.setdefault((key, frozen), (*key, {"BLOCK_M": block_m, **cfg}, False))
    return list(jobs.values())
