"""Time the device planner and the captured decode step on a GPU
(``python -m benchmarks.bench_device_planner [--out DIR]``, or ``bench_planner --device``).

For every batch size: the planner alone (CUDA events over replays of a CUDA graph of
`CHAIN` plans, per plan, and of a graph of one plan, per replay: the second includes the
graph launch), the reference planner on the host for comparison, and the end-to-end step
(plan + decode + reduce, one graph) against the decode + reduce alone over a fixed plan
(one graph). Batches: the ``triton`` profile, causal, q length 1, random kv lengths.

``--profile`` times the planner alone in each form (``fused``: the walk kernel does the
setup and the fill itself, one launch; ``split``: the setup kernel's grid first;
``split-pdl``: the walk launched as its programmatic dependent, on Hopper) for each walk
``--warps`` count, and, split, each kernel alone (the other launches skipped); every form's
plan is first checked equal, buffer by buffer, to the reference planner's (exit 1 on a
mismatch).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from benchmarks.table import fixed_width_table

CHAIN = 50  # plans per graph for the per-plan time
REPLAYS = 20


def captured_graph(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """A CUDA graph of one call of `fn` (called once before, outside the capture)."""
    fn()  # compile and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def median_replay_ms(graph: torch.cuda.CUDAGraph, replays: int = REPLAYS) -> float:
    """Median milliseconds per replay (CUDA events), over `replays` timed replays."""
    graph.replay()
    times = []
    for _ in range(replays):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def _batch(batch: int, heads: int, page: int, max_kv: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    tokens = [rng.randint(1, max_kv) for _ in range(batch)]
    pages = [(n + page - 1) // page for n in tokens]
    return {
        "qo_indptr": torch.arange(batch + 1, dtype=torch.int32),
        "kv_indptr": torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32),
        "kv_last_page_lens": torch.tensor(
            [n - (p - 1) * page for n, p in zip(tokens, pages, strict=True)], dtype=torch.int32
        ),
        "num_heads_q": heads,
        "max_seqlen_qo": 1,
        "uni_seqlen_qo": 1,
        "page_size": page,
        "kv_granularity": max(1, 16 // page),
        "causal": True,
        "max_split_per_batch": -1,
        "q_dtype": torch.bfloat16,
        "kv_dtype": torch.bfloat16,
        "arch": "triton",
        "num_cus": torch.cuda.get_device_properties(0).multi_processor_count,
    }


class _Skipped:
    """Stands for a kernel whose launches are skipped (``kernel[grid](...)`` does nothing)."""

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def _skipping(module: object, name: str) -> Iterator[None]:
    kernel = getattr(module, name)
    setattr(module, name, _Skipped())
    try:
        yield
    finally:
        setattr(module, name, kernel)


def plan_mismatches(plan: object, expected: object) -> list[str]:
    """The buffers and counts in which a device plan differs from the reference's."""
    from conformance.persistent.plan import PLAN_BUFFERS

    names = [
        n for n in PLAN_BUFFERS if not torch.equal(getattr(plan, n).cpu(), getattr(expected, n))
    ]
    counts = ("num_works", "num_partials", "num_tiles")
    return names + [n for n in counts if getattr(plan, n) != getattr(expected, n)]


def profile_case(batch: int, *, heads: int, page: int, max_kv: int, warps: Sequence[int]) -> list:
    """Rows of planner-alone timings: every form and walk warp count, split by kernel."""
    from conformance.persistent import plan_persistent_decode
    from kernels import device_plan, planner_finish, planner_setup, triton_planner

    host_call = _batch(batch, heads, page, max_kv, 0)
    expected = plan_persistent_decode(**host_call)
    call = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in host_call.items()}
    index = {k: call.pop(k) for k in ("qo_indptr", "kv_indptr", "kv_last_page_lens")}
    buffers = device_plan.plan_buffers(**index, **call)
    lanes = max(device_plan.MIN_BLOCK, 1 << (buffers.entries - 1).bit_length())  # the walk's BLOCK
    warps = [w for w in warps if 32 * w <= lanes]  # more threads than lanes: never chosen
    forms = {"fused": {"fused": True}, "split": {"fused": False, "pdl": False}}
    if device_plan.programmatic_launch(index["kv_indptr"].device):
        forms["split-pdl"] = {"fused": False, "pdl": True}
    rows = []
    for (form, keywords), num_warps in itertools.product(forms.items(), (None, *warps)):
        keywords = {**keywords, "num_warps": num_warps}

        def plans(keywords: dict = keywords) -> None:
            for _ in range(CHAIN):
                device_plan.plan_on_device(**index, buffers=buffers, **keywords, **call)

        row = {"batch_size": batch, "num_heads_q": heads, "form": form}
        row["walk_warps"] = num_warps or "default"
        try:
            for name in ("work_info_set", "reduce_final_map", "reduce_partial_map"):
                getattr(buffers, name).fill_(7)  # a plan must write every entry
            plan = device_plan.plan_on_device(**index, buffers=buffers, **keywords, **call)
            row["mismatches"] = plan_mismatches(plan, expected)
            row["total_us"] = median_replay_ms(captured_graph(plans)) / CHAIN * 1e3
            kernels = {
                "setup": (planner_setup, "setup_kernel"),
                "walk": (triton_planner, "plan_kernel"),
                "finish": (planner_finish, "finish_kernel"),
            }
            for alone in kernels if form == "split" else ():
                with contextlib.ExitStack() as stack:
                    for other in kernels.keys() - {alone}:
                        stack.enter_context(_skipping(*kernels[other]))
                    row[f"{alone}_kernel_us"] = (
                        median_replay_ms(captured_graph(plans)) / CHAIN * 1e3
                    )
        except Exception as error:  # kept in the row; the run fails at the end
            row["mismatches"] = [f"error: {type(error).__name__}: {error}"[:200]]
            row["total_us"] = float("nan")
        rows.append(row)
    return rows


PROFILE_TITLES = "B|H|form|warps|plan µs|setup µs|walk µs|finish µs|bit-identical".split("|")


def format_profile(rows: Sequence[dict]) -> str:
    """A fixed-width text table of `profile_case` rows."""
    shown = [
        {
            **r,
            "walk_warps": str(r["walk_warps"]),
            "setup": f"{r['setup_kernel_us']:.2f}" if "setup_kernel_us" in r else "-",
            "walk": f"{r['walk_kernel_us']:.2f}" if "walk_kernel_us" in r else "-",
            "finish": f"{r['finish_kernel_us']:.2f}" if "finish_kernel_us" in r else "-",
            "same": "yes" if not r["mismatches"] else ",".join(r["mismatches"]),
        }
        for r in rows
    ]
    return fixed_width_table(
        PROFILE_TITLES,
        "{batch_size:>5} {num_heads_q:>4} {form:>9} {walk_warps:>7} {total_us:>8.2f} "
        "{setup:>8} {walk:>8} {finish:>9} {same:>13}",
        shown,
    )


def bench_case(
    batch: int, *, heads: int, page: int, max_kv: int, seed: int = 0, num_warps: int | None = None
) -> dict:
    """One row: planner and step timings for one batch size."""
    from conformance.persistent import plan_persistent_decode
    from kernels import device_plan
    from kernels.triton_mla import persistent_mla_decode

    host_call = _batch(batch, heads, page, max_kv, seed)
    call = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in host_call.items()}
    index = {k: call.pop(k) for k in ("qo_indptr", "kv_indptr", "kv_last_page_lens")}
    call["num_warps"] = num_warps
    buffers = device_plan.plan_buffers(
        **index, **{k: v for k, v in call.items() if k != "num_warps"}
    )
    plan = device_plan.plan_on_device(**index, buffers=buffers, **call)
    counts = plan.host_counts()

    def plans() -> None:
        for _ in range(CHAIN):
            device_plan.plan_on_device(**index, buffers=buffers, **call)

    per_plan = median_replay_ms(captured_graph(plans)) / CHAIN
    one_plan = median_replay_ms(
        captured_graph(lambda: device_plan.plan_on_device(**index, buffers=buffers, **call))
    )
    host = []
    for _ in range(5):
        start = time.perf_counter()
        plan_persistent_decode(**host_call)
        host.append(time.perf_counter() - start)

    num_pages = int(host_call["kv_indptr"][-1])
    torch.manual_seed(seed)
    q = torch.randn(batch, heads, 576, device="cuda").to(torch.bfloat16)
    cache = (0.1 * torch.randn(num_pages, page, 576, device="cuda")).to(torch.bfloat16)
    kv_indices = torch.randperm(num_pages, device="cuda").to(torch.int32)
    out = torch.empty(batch, heads, 512, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(batch, heads, dtype=torch.float32, device="cuda")
    decode_args = {
        "kv_indptr": index["kv_indptr"],
        "kv_indices": kv_indices,
        "kv_last_page_lens": index["kv_last_page_lens"],
        "qo_indptr": index["qo_indptr"],
        "page_size": page,
        "sm_scale": 576**-0.5,
        "causal": True,
        "out": out,
        "lse": lse,
    }
    fixed = plan.for_launch()

    def step() -> None:
        device_plan.plan_on_device(**index, buffers=buffers, **call)
        persistent_mla_decode(q, cache, fixed, **decode_args)

    step_ms = median_replay_ms(captured_graph(step))
    decode_ms = median_replay_ms(
        captured_graph(lambda: persistent_mla_decode(q, cache, fixed, **decode_args))
    )
    return {
        "batch_size": batch,
        "num_heads_q": heads,
        "page_size": page,
        "max_kv_len": max_kv,
        "num_cus": call["num_cus"],
        "num_warps": num_warps or "default",
        **{k: counts[k] for k in ("num_tiles", "num_works", "num_partials")},
        "planner_us_per_plan_in_graph": per_plan * 1e3,
        "planner_us_one_plan_graph_replay": one_plan * 1e3,
        "host_reference_planner_us": statistics.median(host) * 1e6,
        "step_us": step_ms * 1e3,
        "decode_alone_us": decode_ms * 1e3,
        "step_over_decode": step_ms / decode_ms,
    }


TITLES = "B|H|tiles|works|plan µs|1-plan µs|host µs|step µs|decode µs|ratio".split("|")
ROW_FORMAT = (
    "{batch_size:>5} {num_heads_q:>4} {num_tiles:>6} {num_works:>6} "
    "{planner_us_per_plan_in_graph:>8.2f} {planner_us_one_plan_graph_replay:>9.2f} "
    "{host_reference_planner_us:>8.0f} {step_us:>9.1f} {decode_alone_us:>9.1f} "
    "{step_over_decode:>6.3f}"
)


def format_table(rows: Sequence[dict]) -> str:
    """A fixed-width text table of `bench_device_planner` rows."""
    return fixed_width_table(TITLES, ROW_FORMAT, rows)


def main(argv: Sequence[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_device_planner", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 1024])
    parser.add_argument("--heads", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--max-kv-len", type=int, default=4096)
    parser.add_argument("--num-warps", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write device_planner.json here")
    parser.add_argument("--profile", action="store_true", help="time the forms and kernels")
    parser.add_argument("--warps", type=int, nargs="*", default=[4, 8, 16, 32])
    ns = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_device_planner: no CUDA device")
    if ns.profile:
        return _profile(ns)
    rows = [
        bench_case(b, heads=h, page=ns.page_size, max_kv=ns.max_kv_len, num_warps=ns.num_warps)
        for h in ns.heads
        for b in ns.batch_sizes
    ]
    print(format_table(rows))
    save_rows(ns.out, "device_planner.json", rows)
    return rows


def save_rows(out: Path | None, file_name: str, rows: list[dict]) -> None:
    """Write `rows`, with the device's name and torch's version, to ``out/file_name``."""
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    (out / file_name).write_text(json.dumps({**meta, "rows": rows}, indent=2))


def _profile(ns: argparse.Namespace) -> list[dict]:
    rows = [
        row
        for h in ns.heads
        for b in ns.batch_sizes
        for row in profile_case(b, heads=h, page=ns.page_size, max_kv=ns.max_kv_len, warps=ns.warps)
    ]
    print(format_profile(rows))
    save_rows(ns.out, "device_planner_profile.json", rows)
    bad = [r for r in rows if r["mismatches"]]
    if bad:
        raise SystemExit(f"bench_device_planner: {len(bad)} plans differ from the reference")
    return rows


if __name__ == "__main__":
    main()
