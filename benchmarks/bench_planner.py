"""Time the reference persistent-decode planner (``python -m benchmarks.bench_planner``).

``--device`` times the GPU planner and the captured decode step instead
(benchmarks/bench_device_planner.py).

Plans a causal, page-1 decode batch with random kv lengths for every batch size x
q length of the grid and reports the median (and best) wall time of
`plan_persistent_decode` over repeats. The default case is AITER's test default
(gfx942, 16 bf16 heads, 304 CUs, max_split_per_batch 32).
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Sequence

import torch

from benchmarks.table import fixed_width_table
from conformance.persistent import plan_persistent_decode

DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fnuz, "fp8fn": torch.float8_e4m3fn}


def bench_planner(
    *,
    batch_sizes: Sequence[int] = (1, 64, 1024),
    seqlens_qo: Sequence[int] = (1, 4),
    num_heads_q: int = 16,
    arch: str = "gfx942",
    num_cus: int = 304,
    dtype: str = "bf16",
    max_split_per_batch: int = 32,
    max_kv_len: int = 8192,
    repeats: int = 25,
    seed: int = 0,
) -> list[dict[str, object]]:
    """Median and best planner time per (batch size, q length); one dict per case."""
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for batch, sq in itertools.product(batch_sizes, seqlens_qo):
        kv_lens = [rng.randint(sq, max_kv_len) for _ in range(batch)]
        args = {
            "qo_indptr": torch.arange(batch + 1, dtype=torch.int32) * sq,
            "kv_indptr": torch.tensor([0, *itertools.accumulate(kv_lens)], dtype=torch.int32),
            "kv_last_page_lens": torch.ones(batch, dtype=torch.int32),
            "num_heads_q": num_heads_q,
            "max_seqlen_qo": sq,
            "uni_seqlen_qo": sq,
            "page_size": 1,
            "kv_granularity": 16,
            "causal": True,
            "max_split_per_batch": max_split_per_batch,
            "q_dtype": DTYPES[dtype],
            "kv_dtype": DTYPES[dtype],
            "arch": arch,
            "num_cus": num_cus,
        }
        plan = plan_persistent_decode(**args)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            plan_persistent_decode(**args)
            times.append(time.perf_counter() - start)
        rows.append(
            {
                "arch": arch,
                "num_heads_q": num_heads_q,
                "dtype": dtype,
                "batch_size": batch,
                "max_seqlen_qo": sq,
                "num_cus": num_cus,
                "num_tiles": plan.num_tiles,
                "num_works": plan.num_works,
                "num_partials": plan.num_partials,
                "median_ms": statistics.median(times) * 1e3,
                "min_ms": min(times) * 1e3,
                "repeats": repeats,
            }
        )
    return rows


TITLES = "arch|H|B|S|tiles|works|partials|median ms|min ms".split("|")
ROW_FORMAT = (
    "{arch:>7} {num_heads_q:>4} {batch_size:>5} {max_seqlen_qo:>2} {num_tiles:>6} {num_works:>6} "
    "{num_partials:>8} {median_ms:>10.2f} {min_ms:>8.2f}"
)


def format_table(rows: Sequence[dict[str, object]]) -> str:
    """A fixed-width text table of `bench_planner` rows."""
    return fixed_width_table(TITLES, ROW_FORMAT, rows)


def main(argv: Sequence[str] | None = None) -> list[dict[str, object]]:
    """Command line: print the table and return the rows."""
    argv = list(argv) if argv is not None else None
    import sys

    args = sys.argv[1:] if argv is None else argv
    if "--device" in args:
        from benchmarks import bench_device_planner

        return bench_device_planner.main([a for a in args if a != "--device"])
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_planner", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--arch", default="gfx942")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--num-cus", type=int, default=304)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--repeats", type=int, default=25)
    ns = parser.parse_args(argv)
    rows = bench_planner(
        arch=ns.arch, num_heads_q=ns.heads, num_cus=ns.num_cus, dtype=ns.dtype, repeats=ns.repeats
    )
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
