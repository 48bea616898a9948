"""GPU smoke test and rough timing of the Triton persistent MLA decode (kernels/triton_mla.py).

Run on a CUDA machine: ``python benchmarks/gpu_smoke_triton_mla.py [--sweep]`` (``--cpu``: tiny
shapes on the Triton interpreter, no timing, to check the script itself). For each case
it plans with the suite's planner (``arch="triton"``, one program per SM), runs the decode +
reduce, prints the max errors against an fp32 torch reference (dequantised cache, KV slots
past each sequence NaN-poisoned), then times the call replayed from a CUDA graph with a few
tile configurations (the launcher's default; ``--sweep``: a few others). Times include the
reduce. Roofline floor: max(KV bytes / 4.3 TB/s,
2176·H·S·B·L FLOP / 790 TFLOP/s) (perf_anchors.md §1).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if "--cpu" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported

from conformance.persistent import plan_persistent_decode
from kernels import triton_mla as tm

DEVICE = "cpu" if "--cpu" in sys.argv else "cuda"
HBM_BYTES_PER_S = 4.3e12
BF16_FLOPS = 790e12


def make_inputs(batch: int, kv_len: int, q_len: int, heads: int, page: int, kv_dtype, seed=0):
    """Random q, a permuted paged cache with NaN past each sequence, and its CSR page list."""
    dev = DEVICE
    gen = torch.Generator(device=dev).manual_seed(seed)
    pages = math.ceil(kv_len / page)
    num_blocks = batch * pages + 8
    kv_scale = 0.5 if kv_dtype != torch.bfloat16 else 1.0
    cache = (torch.randn(num_blocks, page, 576, device=dev, generator=gen) / 10).clamp(-1, 1)
    cache = cache / kv_scale
    last = kv_len - (pages - 1) * page
    perm = torch.randperm(num_blocks, device=dev, generator=gen)
    cache[perm[batch * pages :]] = float("nan")  # unused pages
    last_pages = perm[torch.arange(batch, device=dev) * pages + pages - 1]
    cache[last_pages, last:] = float("nan")  # slots past each sequence
    q = torch.randn(batch * q_len, heads, 576, device=dev, generator=gen).clamp(-4, 4)
    return {
        "q": q.to(torch.bfloat16),
        "kv_cache": cache.to(kv_dtype),
        "kv_indptr": torch.arange(batch + 1, dtype=torch.int32, device=dev) * pages,
        "kv_indices": perm[: batch * pages].to(torch.int32),
        "kv_last_page_lens": torch.full((batch,), last, dtype=torch.int32, device=dev),
        "qo_indptr": torch.arange(batch + 1, dtype=torch.int32, device=dev) * q_len,
        "page_size": page,
        "kv_scale": kv_scale,
    }


def reference(inp, *, kv_len: int, q_len: int, sm_scale: float):
    """fp32 torch decode from the dequantised cache: (out, lse)."""
    q = inp["q"].float()
    tokens, heads, _ = q.shape
    page = inp["page_size"]
    out = torch.empty(tokens, heads, 512, device=DEVICE)
    lse = torch.empty(tokens, heads, device=DEVICE)
    indptr = inp["kv_indptr"].tolist()
    pos = torch.arange(kv_len, device=DEVICE)
    for b in range(len(indptr) - 1):
        table = inp["kv_indices"][indptr[b] : indptr[b + 1]].long()
        kv = inp["kv_cache"][table[pos // page], pos % page].float() * inp["kv_scale"]
        qb = q[b * q_len : (b + 1) * q_len]  # [S, H, 576]
        scores = torch.einsum("shd,ld->shl", qb, kv) * sm_scale
        limit = kv_len - q_len + torch.arange(q_len, device=DEVICE)  # last visible position
        scores = scores.masked_fill(pos[None, None, :] > limit[:, None, None], float("-inf"))
        lse[b * q_len : (b + 1) * q_len] = torch.logsumexp(scores, -1)
        out[b * q_len : (b + 1) * q_len] = torch.softmax(scores, -1) @ kv[:, :512]
    return out, lse


def graph_time_us(fn, iters: int = 20) -> float:
    """Mean time of `fn` replayed from a CUDA graph (captured after a warm-up call)."""
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(iters):
        flush.zero_()  # evict L2
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def run_case(name, *, batch, kv_len, q_len, heads, page, kv_dtype, configs, num_sms, timed):
    """Check one case against the reference and time it under each config."""
    sm_scale = 1.0 / math.sqrt(576)
    inp = make_inputs(batch, kv_len, q_len, heads, page, kv_dtype)
    plan = plan_persistent_decode(
        inp["qo_indptr"].cpu(), inp["kv_indptr"].cpu(), inp["kv_last_page_lens"].cpu(),
        num_heads_q=heads, max_seqlen_qo=q_len, uni_seqlen_qo=q_len, page_size=page,
        kv_granularity=max(1, 16 // page), causal=True,
        max_split_per_batch=-1, q_dtype=inp["q"].dtype, kv_dtype=kv_dtype, arch="triton",
        num_cus=num_sms,
    ).to(DEVICE)  # fmt: skip
    kwargs = {k: inp[k] for k in ("kv_indptr", "kv_indices", "kv_last_page_lens", "qo_indptr")}
    kwargs.update(page_size=page, sm_scale=sm_scale, kv_scale=inp["kv_scale"], causal=True)
    out = torch.empty(batch * q_len, heads, 512, dtype=torch.bfloat16, device=DEVICE)
    lse = torch.empty(batch * q_len, heads, dtype=torch.float32, device=DEVICE)
    ref_out, ref_lse = reference(inp, kv_len=kv_len, q_len=q_len, sm_scale=sm_scale)
    kv_bytes = batch * kv_len * 576 * inp["kv_cache"].element_size()
    floor_us = max(kv_bytes / HBM_BYTES_PER_S, 2176 * heads * q_len * batch * kv_len / BF16_FLOPS)
    rows = []
    for cfg in configs:
        record = {"case": name, "config": cfg, "works": plan.num_works,
                  "partials": plan.num_partials}  # fmt: skip
        try:
            out.fill_(float("nan"))
            tm.persistent_mla_decode(inp["q"], inp["kv_cache"], plan, out=out, lse=lse,
                                     config=cfg, **kwargs)  # fmt: skip
            if timed:
                torch.cuda.synchronize()
            err = (out.float() - ref_out).abs()
            record["max_abs_err"] = float(err.nan_to_num(float("inf")).max())
            record["max_ref"] = float(ref_out.abs().max())
            record["max_lse_err"] = float((lse - ref_lse).abs().max())
            record["nan"] = bool(torch.isnan(out.float()).any())
            if not timed:
                print(json.dumps(record), flush=True)
                rows.append(record)
                continue
            us = graph_time_us(
                lambda cfg=cfg: tm.persistent_mla_decode(
                    inp["q"], inp["kv_cache"], plan, out=out, lse=lse, config=cfg, **kwargs
                )
            )
            record.update(time_us=round(us, 1), floor_us=round(floor_us * 1e6, 1),
                          pct_floor=round(100 * floor_us * 1e6 / us, 1),
                          kv_gbps=round(kv_bytes / us / 1e3, 1))  # fmt: skip
        except Exception as exc:  # report and carry on with the next config
            record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(json.dumps(record), flush=True)
        rows.append(record)
    return rows


def main() -> None:
    """Run the smoke cases; write results to $OUT/triton_mla_smoke*.json when OUT is set."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sweep", action="store_true", help="other configs, not the defaults")
    parser.add_argument("--cpu", action="store_true", help="tiny shapes on the interpreter")
    args = parser.parse_args()
    import triton

    print("triton", triton.__version__, "torch", torch.__version__, flush=True)
    if args.cpu:
        for heads, q_len, page, kv_dtype in [
            (16, 1, 16, torch.bfloat16),
            (128, 2, 16, torch.float8_e4m3fn),
            (16, 1, 1, torch.bfloat16),
        ]:
            run_case(f"cpu-h{heads}-s{q_len}-p{page}", batch=3, kv_len=45, q_len=q_len,
                     heads=heads, page=page, kv_dtype=kv_dtype, configs=[None], num_sms=4,
                     timed=False)  # fmt: skip
        return
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(0), "SMs", num_sms, flush=True)
    fp8 = torch.float8_e4m3fn
    sweep = {
        "h16-b32-4k-bf16-p64": [{"num_stages": 2}, {"BLOCK_N": 32}],
        "h128-b32-4k-bf16-p64": [{"num_stages": 1}, {"num_warps": 4}, {"BLOCK_N": 32}],
        "h16-b32-4k-fp8-p64": [{"BLOCK_N": 32}],
    }
    cases = [
        ("h16-b32-4k-bf16-p64", 16, 1, 64, torch.bfloat16),
        ("h128-b32-4k-bf16-p64", 128, 1, 64, torch.bfloat16),
        ("h16-b32-4k-fp8-p64", 16, 1, 64, fp8),
        ("h128-b32-4k-fp8-p64", 128, 1, 64, fp8),
        ("h128-b32-4k-bf16-p64-mtp2", 128, 2, 64, torch.bfloat16),
        ("h16-b32-4k-bf16-p1", 16, 1, 1, torch.bfloat16),
    ]
    results = []
    for name, heads, q_len, page, kv_dtype in cases:
        configs = sweep.get(name, []) if args.sweep else [None]
        if configs:
            results += run_case(name, batch=32, kv_len=4090, q_len=q_len, heads=heads,
                                page=page, kv_dtype=kv_dtype, configs=configs,
                                num_sms=num_sms, timed=True)  # fmt: skip
    if os.environ.get("OUT"):
        name = "triton_mla_smoke_sweep.json" if args.sweep else "triton_mla_smoke.json"
        Path(os.environ["OUT"], name).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
