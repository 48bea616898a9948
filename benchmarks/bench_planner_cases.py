"""Time the device planner on the decode benchmark's cases, and the captured step there
(``python -m benchmarks.bench_planner_cases [--out DIR]``).

For every case of `benchmarks.decode.cases.PLANNER_TABLE` (every request at the case's kv
length, page 64, q length 1, the ``triton`` profile as the ``cuda`` backend plans): the
planner alone per plan (CUDA events over replays of a graph of `CHAIN` plans), by default,
with the walk forced to its rounds (``chain=False``: the walk before the chain of snaps)
and, beyond `FUSED_MAX_ENTRIES` entries, with the programmatic launch set the other way
(``planner_without_pdl_us`` where the device takes it); the walk's round count; and the
captured step (plan + decode + reduce, one graph) against the decode + reduce alone over a
fixed plan (one graph): the two graphs' replays interleaved, L2 flushed before each (as
the decode benchmark times a decode), medians of `STEP_REPLAYS` each. Every plan is first
checked equal, buffer by buffer, to the reference planner's (exit 1 on a mismatch).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.bench_device_planner import (
    CHAIN,
    captured_graph,
    median_replay_ms,
    plan_mismatches,
    save_rows,
)
from benchmarks.decode.cases import KV_SCALE_FP8, PAGE_SIZE, Q_SCALE_FP8, SM_SCALE
from benchmarks.decode.timing import FLUSH_BYTES, flushed_run
from benchmarks.table import fixed_width_table

STEP_REPLAYS = 30
"""Timed replays of each of the step's two graphs (interleaved)."""


def planner_call(heads: int, kv_format: str, batch: int, context: int) -> dict:
    """The `plan_persistent_decode` call of a case (CPU index tensors)."""
    from conformance.persistent.profiles import get_profile

    pages = (context + PAGE_SIZE - 1) // PAGE_SIZE
    dtype = torch.float8_e4m3fn if kv_format == "fp8" else torch.bfloat16
    return {
        "qo_indptr": torch.arange(batch + 1, dtype=torch.int32),
        "kv_indptr": torch.arange(batch + 1, dtype=torch.int32) * pages,
        "kv_last_page_lens": torch.full(
            (batch,), context - (pages - 1) * PAGE_SIZE, dtype=torch.int32
        ),
        "num_heads_q": heads,
        "max_seqlen_qo": 1,
        "uni_seqlen_qo": 1,
        "page_size": PAGE_SIZE,
        "kv_granularity": get_profile("triton").default_kv_granularity(PAGE_SIZE),
        "causal": True,
        "max_split_per_batch": -1,
        "q_dtype": dtype,
        "kv_dtype": dtype,
        "arch": "triton",
        "num_cus": torch.cuda.get_device_properties(0).multi_processor_count,
    }


def bench_case(heads: int, kv_format: str, batch: int, context: int, *, step: bool) -> dict:
    """One row: planner timings (default, by rounds, and with the programmatic launch set
    the other way where the plan takes three launches), rounds, and the step against
    decode."""
    from conformance.persistent import plan_persistent_decode
    from kernels import device_plan
    from kernels.triton_mla import persistent_mla_decode

    host_call = planner_call(heads, kv_format, batch, context)
    expected = plan_persistent_decode(**host_call)
    call = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in host_call.items()}
    index = {k: call.pop(k) for k in ("qo_indptr", "kv_indptr", "kv_last_page_lens")}
    buffers = device_plan.plan_buffers(**index, **call)
    row: dict = {"case": f"h{heads}-{kv_format}-b{batch}-L{context}"}
    forms = {"planner_us": {}, "planner_rounds_only_us": {"chain": False}}
    if buffers.entries > device_plan.FUSED_MAX_ENTRIES:  # three launches: the other setting
        pdl = device_plan.programmatic_launch(index["kv_indptr"].device)
        forms["planner_without_pdl_us" if pdl else "planner_pdl_us"] = {"pdl": not pdl}
    for name, form in forms.items():
        plan = device_plan.plan_on_device(**index, buffers=buffers, **form, **call)
        problems = plan_mismatches(plan, expected)
        if problems:
            row.setdefault("mismatches", []).extend(f"{name}: {p}" for p in problems)
        if "pdl" not in form:
            row["rounds" if not form else "rounds_without_chain"] = plan.host_counts()["rounds"]

        def plans(form: dict = form) -> None:
            for _ in range(CHAIN):
                device_plan.plan_on_device(**index, buffers=buffers, **form, **call)

        row[name] = median_replay_ms(captured_graph(plans)) / CHAIN * 1e3
    row.update({k: plan.host_counts()[k] for k in ("num_tiles", "num_works", "num_partials")})
    if not step:
        return row
    plan = device_plan.plan_on_device(**index, buffers=buffers, **call)
    num_pages = int(host_call["kv_indptr"][-1])
    torch.manual_seed(0)
    dtype = host_call["kv_dtype"]
    q = torch.randn(batch, heads, 576, device="cuda").to(dtype)
    cache = (0.1 * torch.randn(num_pages, PAGE_SIZE, 576, device="cuda")).to(dtype)
    scales = {"q_scale": Q_SCALE_FP8, "kv_scale": KV_SCALE_FP8} if kv_format == "fp8" else {}
    decode_args = {
        "kv_indptr": index["kv_indptr"],
        "kv_indices": torch.randperm(num_pages, device="cuda").to(torch.int32),
        "kv_last_page_lens": index["kv_last_page_lens"],
        "qo_indptr": index["qo_indptr"],
        "page_size": PAGE_SIZE,
        "sm_scale": SM_SCALE,
        "causal": True,
        "out": torch.empty(batch, heads, 512, dtype=torch.bfloat16, device="cuda"),
        "lse": torch.empty(batch, heads, dtype=torch.float32, device="cuda"),
        "max_seq_len": context,  # as the cuda backend passes it
        **scales,
    }
    fixed = plan.for_launch()

    def whole_step() -> None:
        device_plan.plan_on_device(**index, buffers=buffers, **call)
        persistent_mla_decode(q, cache, fixed, **decode_args)

    decode = captured_graph(lambda: persistent_mla_decode(q, cache, fixed, **decode_args))
    row["step_us"], row["decode_alone_us"] = interleaved_us([captured_graph(whole_step), decode])
    row["step_over_decode_us"] = row["step_us"] - row["decode_alone_us"]
    row["step_over_decode"] = row["step_us"] / row["decode_alone_us"]
    return row


def interleaved_us(
    graphs: Sequence[torch.cuda.CUDAGraph], replays: int = STEP_REPLAYS
) -> list[float]:
    """Median µs per replay of each graph, the graphs replayed in turn (their order
    alternating), L2 flushed before each replay by reading `FLUSH_BYTES`."""
    flush = torch.ones(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for graph in graphs:
        graph.replay()
    timed: list[list[tuple[torch.cuda.Event, torch.cuda.Event]]] = [[] for _ in graphs]
    for rep in range(replays):
        order = range(len(graphs)) if rep % 2 == 0 else reversed(range(len(graphs)))
        for i in order:
            timed[i].append(flushed_run(flush, graphs[i].replay))
    torch.cuda.synchronize()
    return [statistics.median(a.elapsed_time(b) for a, b in t) * 1e3 for t in timed]


TITLES = "case|tiles|works|rounds|plan µs|by rounds µs|step µs|decode µs|step-decode µs".split("|")


def format_table(rows: Sequence[dict]) -> str:
    """A fixed-width text table of `bench_case` rows."""
    shown = [
        {
            **r,
            "rounds_shown": f"{r['rounds']}/{r['rounds_without_chain']}",
            **{
                k: f"{r[k]:.1f}" if k in r else "-"
                for k in ("step_us", "decode_alone_us", "step_over_decode_us")
            },
        }
        for r in rows
    ]
    return fixed_width_table(
        TITLES,
        "{case:>24} {num_tiles:>6} {num_works:>6} {rounds_shown:>8} {planner_us:>8.2f} "
        "{planner_rounds_only_us:>12.2f} {step_us:>9} {decode_alone_us:>9} "
        "{step_over_decode_us:>14}",
        shown,
    )


def main(argv: Sequence[str] | None = None) -> list[dict]:
    from benchmarks.decode.cases import PLANNER_TABLE

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_planner_cases", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=None, help="write planner_cases.json here")
    parser.add_argument("--no-step", action="store_true", help="time the planner only")
    ns = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_planner_cases: no CUDA device")
    rows = []
    for case in PLANNER_TABLE:
        rows.append(bench_case(*case, step=not ns.no_step))
        print(json.dumps(rows[-1]), flush=True)  # progress, one row a line
    print(format_table(rows))
    save_rows(ns.out, "planner_cases.json", rows)
    bad = [r["case"] for r in rows if r.get("mismatches")]
    if bad:
        raise SystemExit(f"bench_planner_cases: plans differ from the reference: {bad}")
    return rows


if __name__ == "__main__":
    main()
