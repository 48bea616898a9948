"""Decode benchmark of the suite's Triton persistent MLA decode, against the roofline floor.

``python -m benchmarks.bench_decode [--quick] [--tune] [--out DIR]`` (CUDA needed; without
a CUDA device it says so and exits 0 having run nothing). In one run it:

1. measures the device's ceilings: a 2 GiB device-to-device copy and an 8192³ bf16 matmul
   (`benchmarks.roofline.measure_ceilings`);
2. optionally (``--tune``) times candidate tile configurations of `kernels.triton_mla` on the
   target shapes and uses the fastest per (rows per program, KV format) for the grid;
3. for every case of the grid (DeepSeek-R1 dims, page 64, heads {16, 128}, KV bf16 / fp8,
   batch {1, 32, 128}, context {1k, 4k, 16k, 64k}, q_len {1, 2}, plus 128 heads at 8k) builds
   the batch through `benchmarks.metadata_runner.build_decode_metadata` (a CAM construction
   site), plans it (timed separately, CPU), checks every implementation against an fp32
   reference on two requests, and times
   - ``triton``: `kernels.triton_mla.persistent_mla_decode` (decode + reduce),
   - ``baseline``: the classic two-stage split-KV decode (`benchmarks.baseline_split_kv`),
   - ``sdpa``: torch's ``scaled_dot_product_attention`` over the gathered (dense) cache;
4. writes ``<date>-<gpu>.json`` and ``.md`` under ``--out`` (time, TFLOP/s, GB/s, fraction of
   the floor, speed-ups).

Timing: each implementation is captured in a CUDA graph (eager if capture fails) and
replayed; L2 is flushed before every timed replay by reading a 256 MiB buffer (a read leaves
no dirty lines whose write-back would land in the timed call); the median of ≥ 5
replays after a warm-up is reported. Inputs are random (q ~ N(0, 1), cache ~ N(0, 0.01)),
pages randomly permuted, slots past each sequence NaN. fp8 cases use e4m3 q and e4m3 KV with
per-tensor scales (AITER's fp8 decode); the baseline and SDPA get the dequantised bf16 q,
the baseline dequantises the fp8 cache on load, SDPA reads a dequantised bf16 copy.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import hashlib
import itertools
import json
import math
import multiprocessing as mp
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE_SIZE = 64
SM_SCALE = 1.0 / math.sqrt(576)
Q_SCALE_FP8 = 0.25
KV_SCALE_FP8 = 0.5
REF_REQUESTS = 2  # requests checked against the fp32 reference (first and last)
FLUSH_BYTES = 256 << 20
NO_CUDA_MESSAGE = (
    "the decode benchmark needs a CUDA device: torch {version} sees none here; nothing was run"
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One grid point."""

    heads: int
    kv_format: str  # "bf16" or "fp8" (fp8: e4m3 q and KV)
    batch: int
    context: int
    q_len: int

    @property
    def name(self) -> str:
        """Short id, e.g. ``h16-bf16-b128-L4096-s1``."""
        return f"h{self.heads}-{self.kv_format}-b{self.batch}-L{self.context}-s{self.q_len}"


def full_grid() -> list[Case]:
    """The issue's grid plus 128 heads, B=128 at 8k."""
    cases = [
        Case(h, kv, b, L, s)
        for h, kv, b, L, s in itertools.product(
            (16, 128), ("bf16", "fp8"), (1, 32, 128), (1024, 4096, 16384, 65536), (1, 2)
        )
    ]
    cases += [Case(128, kv, 128, 8192, s) for kv in ("bf16", "fp8") for s in (1, 2)]
    return sorted(cases, key=lambda c: (c.heads, c.kv_format, c.q_len, c.batch, c.context))


def quick_grid() -> list[Case]:
    """The target cases and two small ones."""
    return [
        Case(16, "bf16", 128, 4096, 1),
        Case(16, "bf16", 128, 16384, 1),
        Case(16, "fp8", 128, 4096, 1),
        Case(16, "fp8", 128, 16384, 1),
        Case(128, "bf16", 128, 8192, 1),
        Case(128, "fp8", 128, 8192, 1),
        Case(16, "bf16", 1, 1024, 1),
        Case(128, "bf16", 32, 4096, 2),
    ]


# Tile configurations tried by --tune, keyed like kernels.triton_mla.DECODE_CONFIGS
# (rows per program, KV format); each is timed on the shapes of TUNE_SHAPES. Launch keys:
# SPLIT_GROUPS (a folded plan's head groups on programs side by side), PLAN_HEADS (the
# benchmark plans for that many heads and the kernel runs the plan once per head group).
TUNE_CANDIDATES: dict[tuple[int, str], list[dict[str, int]]] = {
    (16, "bf16"): [
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
        {"BLOCK_N": 32, "num_warps": 4, "num_stages": 4},
    ],
    (16, "fp8"): [
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "REG_PREFETCH": 1},
        {"BLOCK_N": 32, "num_warps": 8, "num_stages": 3, "REG_PREFETCH": 1},
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "F16_TILE": 1, "REG_PREFETCH": 1},
    ],
    (32, "bf16"): [
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
        {"BLOCK_N": 32, "num_warps": 8, "num_stages": 4},
    ],
    (32, "fp8"): [
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "REG_PREFETCH": 1},
        {"BLOCK_N": 32, "num_warps": 8, "num_stages": 3},
    ],
    (64, "bf16"): [
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "PLAN_HEADS": 64},
    ],
    (64, "fp8"): [
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "PLAN_HEADS": 64},
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "PLAN_HEADS": 64},
    ],
}
# Launch options the harness applies itself (PLAN_HEADS), per config key, set by --tune.
LAUNCH_OPTIONS: dict[tuple[int, str], dict[str, int]] = {}


def config_key(case: Case) -> tuple[int, str]:
    """The DECODE_CONFIGS key of a case: (rows per program, KV format)."""
    rows = case.q_len * min(case.heads, 64)
    return max(16, min(64, 1 << (rows - 1).bit_length())), case.kv_format


def split_launch(cfg: dict[str, int] | None) -> tuple[dict[str, int] | None, int | None]:
    """(kernel config, heads to plan for) of a candidate that may carry PLAN_HEADS."""
    if not cfg:
        return cfg, None
    kernel_cfg = {k: v for k, v in cfg.items() if k != "PLAN_HEADS"}
    return kernel_cfg, cfg.get("PLAN_HEADS")


TUNE_SHAPES: dict[tuple[int, str], list[Case]] = {
    (16, "bf16"): [Case(16, "bf16", 128, 4096, 1), Case(16, "bf16", 128, 16384, 1)],
    (16, "fp8"): [Case(16, "fp8", 128, 4096, 1), Case(16, "fp8", 128, 16384, 1)],
    (32, "bf16"): [Case(16, "bf16", 128, 16384, 2)],
    (32, "fp8"): [Case(16, "fp8", 128, 16384, 2)],
    (64, "bf16"): [Case(128, "bf16", 128, 8192, 1)],
    (64, "fp8"): [Case(128, "fp8", 128, 8192, 1)],
}
# Timing probes at 128 heads (ABLATE: 1 = no PV dot, 2 = no QK dot): where the time goes.
ABLATION_SHAPES = [Case(128, "bf16", 128, 8192, 1), Case(128, "fp8", 128, 8192, 1)]


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Batch:
    """Device inputs of one case, in the layouts every implementation needs."""

    case: Case
    q: Any  # [B·s, H, 576], bf16 or e4m3
    q_bf16: Any  # dequantised q for the baseline and SDPA
    kv_cache: Any  # [blocks, 64, 576], bf16 or e4m3
    block_table: Any  # [B, pages] int32 (device)
    seq_lens: Any  # [B] int32 (device)
    qo_indptr: Any  # [B + 1] int32 (device)
    qo_indptr_cpu: Any
    kv_indptr: Any  # [B + 1] int32 (device) and the CPU copies the planner takes
    kv_indptr_cpu: Any
    kv_indices: Any
    kv_last_page_lens: Any
    kv_last_page_lens_cpu: Any
    q_scale: float
    kv_scale: float


def make_batch(case: Case, device: Any, seed: int = 0) -> Batch:
    """Random inputs built from a CAM (`build_decode_metadata`), slack slots NaN-poisoned."""
    import torch

    from backends.common import paged_csr
    from benchmarks.metadata_runner import build_decode_metadata

    cam = build_decode_metadata(
        [case.context] * case.batch,
        query_len=case.q_len,
        block_size=PAGE_SIZE,
        device=device,
        seed=seed,
    )
    kv_indptr, kv_indices, last = paged_csr(cam.block_table_tensor, cam.seq_lens, PAGE_SIZE)
    num_blocks = int(kv_indices.max()) + 1  # page 0 is never used: it stays NaN
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    fp8 = case.kv_format == "fp8"
    kv_scale = KV_SCALE_FP8 if fp8 else 1.0
    q_scale = Q_SCALE_FP8 if fp8 else 1.0
    cache = torch.empty(num_blocks, PAGE_SIZE, 576, dtype=torch.bfloat16, device=device)
    cache.normal_(0.0, 0.1 / kv_scale, generator=gen)
    cache.clamp_(-1.0 / kv_scale, 1.0 / kv_scale)
    cache[0] = float("nan")
    last_len = case.context - (math.ceil(case.context / PAGE_SIZE) - 1) * PAGE_SIZE
    if last_len < PAGE_SIZE:
        last_pages = cam.block_table_tensor[:, math.ceil(case.context / PAGE_SIZE) - 1].long()
        cache[last_pages, last_len:] = float("nan")
    if fp8:
        cache = cache.to(torch.float8_e4m3fn)
    q = torch.randn(case.batch * case.q_len, case.heads, 576, device=device, generator=gen)
    q = q.clamp_(-4.0, 4.0)
    if fp8:
        q8 = (q / q_scale).to(torch.float8_e4m3fn)
        q_bf16 = (q8.float() * q_scale).to(torch.bfloat16)  # exact: e4m3 · 2⁻² fits bf16
        q = q8
    else:
        q = q.to(torch.bfloat16)
        q_bf16 = q
    return Batch(
        case=case,
        q=q,
        q_bf16=q_bf16,
        kv_cache=cache,
        block_table=cam.block_table_tensor,
        seq_lens=cam.seq_lens,
        qo_indptr=cam.query_start_loc,
        qo_indptr_cpu=cam.query_start_loc_cpu,
        kv_indptr=kv_indptr.to(device),
        kv_indptr_cpu=kv_indptr,
        kv_indices=kv_indices.to(device),
        kv_last_page_lens=last.to(device),
        kv_last_page_lens_cpu=last,
        q_scale=q_scale,
        kv_scale=kv_scale,
    )


def reference_rows(batch: Batch, requests: Sequence[int]) -> tuple[Any, Any, Any]:
    """fp32 decode of `requests` from the dequantised inputs: (row ids, out, lse)."""
    import torch

    case = batch.case
    s, L = case.q_len, case.context
    rows, outs, lses = [], [], []
    pos = torch.arange(L, device=batch.q.device)
    for b in requests:
        table = batch.block_table[b, : math.ceil(L / PAGE_SIZE)].long()
        kv = batch.kv_cache[table[pos // PAGE_SIZE], pos % PAGE_SIZE].float() * batch.kv_scale
        q = batch.q[b * s : (b + 1) * s].float() * batch.q_scale  # [s, H, 576]
        scores = torch.einsum("shd,ld->shl", q, kv) * SM_SCALE
        last = L - s + torch.arange(s, device=q.device)
        scores = scores.masked_fill(pos[None, None, :] > last[:, None, None], float("-inf"))
        lses.append(torch.logsumexp(scores, -1))
        outs.append(torch.softmax(scores, -1) @ kv[:, :512])
        rows += list(range(b * s, (b + 1) * s))
    return torch.tensor(rows, device=batch.q.device), torch.cat(outs), torch.cat(lses)


# --------------------------------------------------------------------------------------------
# Implementations
# --------------------------------------------------------------------------------------------


def plan_for(
    batch: Batch, num_sms: int, device: str = "cuda", plan_heads: int | None = None
) -> Any:
    """The suite planner's ``triton`` plan of the batch (CPU), one program per SM.

    `plan_heads` plans for that many heads instead of all of them (the kernel then runs the
    plan once per group of heads).
    """
    import torch

    from conformance.persistent import plan_persistent_decode
    from conformance.persistent.profiles import get_profile

    case = batch.case
    return plan_persistent_decode(
        batch.qo_indptr_cpu,
        batch.kv_indptr_cpu,
        batch.kv_last_page_lens_cpu,
        num_heads_q=plan_heads or case.heads,
        max_seqlen_qo=case.q_len,
        uni_seqlen_qo=case.q_len,
        page_size=PAGE_SIZE,
        kv_granularity=get_profile("triton").default_kv_granularity(PAGE_SIZE),  # as the backend
        causal=True,
        max_split_per_batch=-1,
        q_dtype=batch.q.dtype,
        kv_dtype=batch.kv_cache.dtype,
        arch="triton",
        num_cus=num_sms,
    ).to(torch.device(device))


def triton_fn(batch: Batch, plan: Any, config: dict[str, int] | None = None) -> Callable[[], Any]:
    """A closure running the suite's persistent decode into preallocated outputs."""
    import torch

    from kernels.triton_mla import persistent_mla_decode

    rows, heads = batch.q.shape[:2]
    out = torch.empty(rows, heads, 512, dtype=torch.bfloat16, device=batch.q.device)
    lse = torch.empty(rows, heads, dtype=torch.float32, device=batch.q.device)

    def run() -> Any:
        return persistent_mla_decode(
            batch.q,
            batch.kv_cache,
            plan,
            kv_indptr=batch.kv_indptr,
            kv_indices=batch.kv_indices,
            kv_last_page_lens=batch.kv_last_page_lens,
            qo_indptr=batch.qo_indptr,
            page_size=PAGE_SIZE,
            sm_scale=SM_SCALE,
            q_scale=batch.q_scale,
            kv_scale=batch.kv_scale,
            causal=True,
            out=out,
            lse=lse,
            config=config,
        )

    return run


def baseline_fn(batch: Batch, num_sms: int) -> tuple[Callable[[], Any], int]:
    """A closure running the two-stage split-KV baseline, and its split count."""
    import torch

    from benchmarks import baseline_split_kv as base

    case = batch.case
    rows = case.batch * case.q_len
    splits = base.default_num_splits(
        batch_rows=rows, num_heads=case.heads, max_seq_len=case.context, num_sms=num_sms
    )
    seq_rows = base.row_seq_lens(batch.seq_lens, case.q_len)
    scratch = base.split_kv_scratch(rows, case.heads, splits, batch.q.device)
    out = torch.empty(rows, case.heads, 512, dtype=torch.bfloat16, device=batch.q.device)
    lse = torch.empty(rows, case.heads, dtype=torch.float32, device=batch.q.device)

    def run() -> Any:
        return base.split_kv_decode(
            batch.q_bf16,
            batch.kv_cache,
            batch.block_table,
            seq_rows,
            q_len=case.q_len,
            sm_scale=SM_SCALE,
            num_splits=splits,
            k_scale=batch.kv_scale,
            scratch=scratch,
            out=out,
            lse=lse,
        )

    return run, splits


def sdpa_fn(batch: Batch) -> tuple[Callable[[], Any], str]:
    """A closure running torch SDPA over the gathered dense cache, and the backend it uses.

    Heads become query positions of one KV head (MQA folded into M): q ``[B, 1, s·H, 576]``,
    K ``[B, 1, L, 576]``, V the first 512 columns of K, an explicit causal mask when s > 1.
    The gather (and, for fp8, the dequantisation) is done once outside the timed region.
    """
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    case = batch.case
    B, s, H, L = case.batch, case.q_len, case.heads, case.context
    pages = math.ceil(L / PAGE_SIZE)
    table = batch.block_table[:, :pages].long()
    dense = batch.kv_cache[table].reshape(B, pages * PAGE_SIZE, 576)[:, :L]
    if dense.dtype != torch.bfloat16:
        dense = (dense.to(torch.bfloat16) * batch.kv_scale).to(torch.bfloat16)
    k = dense.unsqueeze(1)
    del dense
    v = k[..., :512]
    q = batch.q_bf16.reshape(B, s * H, 576).unsqueeze(1)
    mask = None
    if s > 1:
        pos = torch.arange(L, device=q.device)
        token = torch.arange(s, device=q.device).repeat_interleave(H)
        mask = (pos[None, :] <= (L - s + token)[:, None])[None, None]
    for backend in (
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH,
    ):

        def run(backend: Any = backend) -> Any:
            with sdpa_kernel([backend]):
                return sdpa(q, k, v, attn_mask=mask, scale=SM_SCALE)

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # each rejected backend warns why
                run()
            if q.is_cuda:
                torch.cuda.synchronize()
        except RuntimeError:
            continue
        return run, backend.name
    raise RuntimeError("no SDPA backend accepted the case")


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


class Timer:
    """CUDA-graph replay timing with an L2 flush (a 256 MiB read) before every timed replay."""

    def __init__(self, *, budget_ms: float, min_reps: int = 5, max_reps: int = 100) -> None:
        import torch

        self.flush = torch.ones(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        self.budget_ms = budget_ms
        self.min_reps = min_reps
        self.max_reps = max_reps

    def __call__(self, fn: Callable[[], Any]) -> dict[str, Any]:
        """Median microseconds of `fn` (graph-captured when possible) and how it was timed."""
        import torch

        fn()  # warm-up: compilation, autotuning, allocator
        torch.cuda.synchronize()
        graph = None
        try:
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
        except Exception:  # capture is an optimisation: fall back to eager launches
            graph = None
            torch.cuda.synchronize()
        run = graph.replay if graph is not None else fn
        times = self._times(run, 3)
        est = max(statistics.median(times), 1e-3)
        reps = int(min(self.max_reps, max(self.min_reps, self.budget_ms / est)))
        times = self._times(run, reps)
        return {
            "us": statistics.median(times) * 1e3,
            "min_us": min(times) * 1e3,
            "reps": reps,
            "graph": graph is not None,
        }

    def _times(self, run: Callable[[], Any], reps: int) -> list[float]:
        import torch

        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(reps)
        ]
        for start, end in events:
            self.flush.sum()  # read 256 MiB: evicts L2 without leaving dirty lines behind
            start.record()
            run()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]


# --------------------------------------------------------------------------------------------
# One case
# --------------------------------------------------------------------------------------------


def _errors(out: Any, lse: Any, rows: Any, ref_out: Any, ref_lse: Any) -> dict[str, float]:
    import torch

    got = out[rows].float()
    return {
        "max_abs_err": float((got - ref_out).abs().nan_to_num(float("inf")).max()),
        "max_lse_err": float((lse[rows].float() - ref_lse).abs().nan_to_num(float("inf")).max())
        if lse is not None
        else float("nan"),
        "nan_anywhere": bool(torch.isnan(out.float()).any()),
    }


def run_case(
    case: Case, *, ceilings: Any, timer: Timer, num_sms: int, impls: Sequence[str]
) -> dict[str, Any]:
    """Check and time every implementation on one case; a record for the JSON file."""
    import torch

    from benchmarks.roofline import DecodeShape, achieved, floor

    shape = DecodeShape(
        batch=case.batch,
        heads=case.heads,
        context=case.context,
        q_len=case.q_len,
        kv_format=case.kv_format,
        q_format=case.kv_format,
    )
    record: dict[str, Any] = {"case": case.name, **dataclasses.asdict(case)}
    f = floor(shape, ceilings)
    record["floor"] = {
        "us": f.seconds * 1e6,
        "memory_us": f.memory_s * 1e6,
        "compute_us": f.compute_s * 1e6,
        "bound": f.bound,
        "flops": shape.flops,
        "bytes": shape.min_bytes,
    }
    batch = make_batch(case, "cuda")
    reqs = sorted({0, case.batch - 1})[:REF_REQUESTS]
    rows, ref_out, ref_lse = reference_rows(batch, reqs)
    record["ref_max_abs"] = float(ref_out.abs().max())

    if "triton" in impls:
        plan_heads = LAUNCH_OPTIONS.get(config_key(case), {}).get("PLAN_HEADS")
        plan_times = []
        for _ in range(3):
            t0 = time.perf_counter()
            plan = plan_for(batch, num_sms, plan_heads=plan_heads)
            torch.cuda.synchronize()
            plan_times.append((time.perf_counter() - t0) * 1e3)
        record["plan"] = {
            "ms": statistics.median(plan_times),
            "num_works": plan.num_works,
            "num_partials": plan.num_partials,
            "heads_per_work": plan.heads_per_work,
            "fold_ratio": plan.fold_ratio,
            "num_cus": num_sms,
            "planned_heads": plan_heads or case.heads,
        }
        fn = triton_fn(batch, plan)
        out, lse = fn()
        torch.cuda.synchronize()
        result = _errors(out, lse, rows, ref_out, ref_lse)
        result |= timer(fn)
        record["triton"] = result | achieved(shape, ceilings, result["us"] * 1e-6)
        if plan_heads:  # also the plan the backend makes (all heads, folded): for comparison
            folded = plan_for(batch, num_sms)
            fn = triton_fn(batch, folded)
            out, lse = fn()
            torch.cuda.synchronize()
            result = _errors(out, lse, rows, ref_out, ref_lse) | timer(fn)
            record["triton_folded_plan"] = result | achieved(shape, ceilings, result["us"] * 1e-6)

    if "baseline" in impls:
        fn, splits = baseline_fn(batch, num_sms)
        out, lse = fn()
        torch.cuda.synchronize()
        result = _errors(out, lse, rows, ref_out, ref_lse) | {"num_splits": splits}
        result |= timer(fn)
        record["baseline"] = result | achieved(shape, ceilings, result["us"] * 1e-6)

    if "sdpa" in impls:
        try:
            fn, backend = sdpa_fn(batch)
            out = fn().squeeze(1).reshape(case.batch * case.q_len, case.heads, 512)
            torch.cuda.synchronize()
            result = _errors(out, None, rows, ref_out, ref_lse) | {"backend": backend}
            result |= timer(fn)
            record["sdpa"] = result | achieved(shape, ceilings, result["us"] * 1e-6)
        except torch.cuda.OutOfMemoryError as exc:
            record["sdpa"] = {"skipped": f"out of memory: {str(exc).splitlines()[0]}"}
        finally:
            torch.cuda.empty_cache()

    for other in ("baseline", "sdpa"):
        if "us" in record.get("triton", {}) and "us" in record.get(other, {}):
            record[f"speedup_vs_{other}"] = record[other]["us"] / record["triton"]["us"]
    del batch
    torch.cuda.empty_cache()
    return record


# --------------------------------------------------------------------------------------------
# Tuning, ablation, compilation
# --------------------------------------------------------------------------------------------


def tune(*, timer: Timer, num_sms: int, keys: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """Time every candidate config on its shapes; install the fastest in DECODE_CONFIGS."""
    import torch

    from kernels import triton_mla as tm

    report: dict[str, Any] = {}
    for key in keys:
        rows = []
        for case in TUNE_SHAPES[key]:
            batch = make_batch(case, "cuda")
            plans: dict[int | None, Any] = {}
            reqs = sorted({0, case.batch - 1})
            ref_rows, ref_out, ref_lse = reference_rows(batch, reqs)
            for cfg in TUNE_CANDIDATES[key]:
                entry: dict[str, Any] = {"case": case.name, "config": cfg}
                kernel_cfg, plan_heads = split_launch(cfg)
                try:
                    if plan_heads not in plans:
                        plans[plan_heads] = plan_for(batch, num_sms, plan_heads=plan_heads)
                    fn = triton_fn(batch, plans[plan_heads], {"BLOCK_M": key[0], **kernel_cfg})
                    out, lse = fn()
                    torch.cuda.synchronize()
                    entry |= _errors(out, lse, ref_rows, ref_out, ref_lse)
                    entry |= timer(fn)
                except Exception as exc:  # a config that does not compile or run
                    entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append(entry)
                print(f"  tune {key} {case.name} {cfg}: {_fmt_us(entry)}", flush=True)
            del batch, plans
            torch.cuda.empty_cache()
        best, best_score = None, math.inf
        for cfg in TUNE_CANDIDATES[key]:
            mine = [r for r in rows if r["config"] == cfg]
            if any("us" not in r or r["nan_anywhere"] or r["max_abs_err"] > 0.05 for r in mine):
                continue
            score = sum(math.log(r["us"]) for r in mine)
            if score < best_score:
                best, best_score = cfg, score
        if best is not None:
            kernel_cfg, plan_heads = split_launch(best)
            tm.DECODE_CONFIGS[key] = dict(kernel_cfg)
            if plan_heads:
                LAUNCH_OPTIONS[key] = {"PLAN_HEADS": plan_heads}
            else:
                LAUNCH_OPTIONS.pop(key, None)
        report[f"{key[0]}-{key[1]}"] = {"best": best, "runs": rows}
    return report


def ablate(*, timer: Timer, num_sms: int) -> list[dict[str, Any]]:
    """Time the 128-head kernel without its PV dot and without its QK dot."""
    import torch

    from kernels import triton_mla as tm

    rows = []
    for case in ABLATION_SHAPES:
        batch = make_batch(case, "cuda")
        key = (64, case.kv_format)
        plan = plan_for(batch, num_sms, plan_heads=LAUNCH_OPTIONS.get(key, {}).get("PLAN_HEADS"))
        base = {"BLOCK_M": 64, **tm.DECODE_CONFIGS[key]}
        for probe, what in ((0, "full kernel"), (1, "no PV dot"), (2, "no QK dot")):
            entry = {"case": case.name, "probe": what, "config": base}
            try:
                entry |= timer(triton_fn(batch, plan, {**base, "ABLATE": probe}))
            except Exception as exc:
                entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(entry)
            print(f"  ablate {case.name} {what}: {_fmt_us(entry)}", flush=True)
        del batch, plan
        torch.cuda.empty_cache()
    return rows


def _compile_job(job: tuple[int, int, str, dict[str, int] | None, bool]) -> str:
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
        triton_fn(batch, plan, kernel_cfg)()
        if with_baseline:
            baseline_fn(batch, 132)[0]()
        torch.cuda.synchronize()
        return "ok"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:120]}"


def precompile(jobs: list[tuple[int, int, str, dict[str, int] | None, bool]], workers: int) -> None:
    """Compile kernels in parallel processes (Triton's on-disk cache is shared)."""
    if workers <= 1 or not jobs:
        return
    t0 = time.perf_counter()
    from benchmarks import bench_decode as this  # picklable by module name under -m

    ctx = mp.get_context("spawn")
    try:
        with ctx.Pool(min(workers, len(jobs))) as pool:
            results = pool.map_async(this._compile_job, jobs, chunksize=1).get(timeout=300)
    except Exception as exc:  # compilation then happens on first use
        print(f"precompile failed ({type(exc).__name__}: {exc}); compiling on first use")
        return
    failed = [(j, r) for j, r in zip(jobs, results, strict=True) if r != "ok"]
    print(f"precompiled {len(jobs)} kernel sets in {time.perf_counter() - t0:.0f} s", flush=True)
    for job, result in failed:
        print(f"  precompile {job}: {result}")


def compile_jobs(cases: Sequence[Case], *, tuning: bool) -> list[Any]:
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


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------


def _fmt_us(entry: dict[str, Any]) -> str:
    if "us" in entry:
        return f"{entry['us']:.1f} µs (err {entry.get('max_abs_err', float('nan')):.1e})"
    return entry.get("error", entry.get("skipped", "?"))


def environment() -> dict[str, Any]:
    """Versions and device facts for the results file."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    env: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "sms": props.multi_processor_count,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem",
             "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        env["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        env["nvidia_smi"] = "unavailable"
    kernel = ROOT / "kernels" / "triton_mla.py"
    env["kernel_sha256"] = hashlib.sha256(kernel.read_bytes()).hexdigest()[:16]
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        env["git_head"] = head.stdout.strip() or "unavailable"
    except (OSError, subprocess.SubprocessError):
        env["git_head"] = "unavailable"
    return env


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def markdown_table(records: Sequence[dict[str, Any]]) -> str:
    """The results table: one row per case."""
    head = (
        "| case | floor µs (bound) | triton µs | TFLOP/s | GB/s | % of floor | baseline µs "
        "(splits) | × baseline | SDPA µs (backend) | × SDPA | plan ms (works/partials) "
        "| max err t/b/s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in records:
        if "skipped" in r:
            lines.append(f"| {r['case']} | skipped: {r['skipped']} |" + " |" * 10)
            continue
        f = r["floor"]
        bound = "mem" if f["memory_us"] >= f["compute_us"] else "compute"
        t, b, s = r.get("triton", {}), r.get("baseline", {}), r.get("sdpa", {})
        plan = r.get("plan", {})

        def us(x: dict[str, Any]) -> str:
            return f"{x['us']:.1f}" if "us" in x else x.get("skipped", "–")

        folded = r.get("triton_folded_plan", {})
        t_cell = us(t) + (f" (folded plan {folded['us']:.1f})" if "us" in folded else "")

        def err(x: dict[str, Any]) -> str:
            return f"{x['max_abs_err']:.1e}" if "max_abs_err" in x else "–"

        lines.append(
            f"| {r['case']} | {f['us']:.1f} ({bound}) | {t_cell} | "
            f"{t.get('tflops', 0):.0f} | {t.get('gbps', 0):.0f} | "
            f"{_pct(t.get('fraction_of_floor'))} | {us(b)} ({b.get('num_splits', '–')}) | "
            f"{r.get('speedup_vs_baseline', float('nan')):.2f} | {us(s)} "
            f"({s.get('backend', '–')}) | {r.get('speedup_vs_sdpa', float('nan')):.2f} | "
            f"{plan.get('ms', float('nan')):.1f} ({plan.get('num_works', '–')}/"
            f"{plan.get('num_partials', '–')}) | {err(t)} / {err(b)} / {err(s)} |"
        )
    return "\n".join(lines)


def write_reports(out_dir: Path, payload: dict[str, Any]) -> tuple[Path, Path]:
    """``<date>-<gpu>.json`` and ``.md`` under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = payload["environment"]["gpu"].lower().replace("nvidia", "").strip().split()[0]
    stem = f"{payload['date']}-{gpu}"
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    c = payload["ceilings"]
    lines = [
        f"# MLA decode benchmark, {payload['environment']['gpu']}, {payload['date']}",
        "",
        f"Command: `{payload['command']}`",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in payload["environment"].items()),
        "",
        f"Ceilings measured in this run: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s "
        f"(bytes read + written), bf16 matmul {c['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s, "
        f"ridge {c['ridge_flops_per_byte']:.0f} FLOP/B.",
        "",
        "Decode configs used: "
        + ", ".join(f"{k}: {v}" for k, v in payload["decode_configs"].items()),
        "",
        markdown_table(payload["cases"]),
        "",
    ]
    md_path.write_text("\n".join(lines))
    return json_path, md_path


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_decode", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="the target cases only")
    parser.add_argument("--tune", action="store_true", help="time candidate configs first")
    parser.add_argument("--ablate", action="store_true", help="128-head timing probes")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    parser.add_argument("--impls", default="triton,baseline,sdpa")
    parser.add_argument("--budget-ms", type=float, default=25.0, help="timing budget per call")
    parser.add_argument("--workers", type=int, default=8, help="parallel compile processes")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print(NO_CUDA_MESSAGE.format(version=torch.__version__))
        return 0
    sys.path.insert(0, str(ROOT))
    from benchmarks.roofline import Ceilings, measure_ceilings
    from kernels import triton_mla as tm

    started = time.perf_counter()
    cases = quick_grid() if args.quick else full_grid()
    if args.only:
        wanted = [w for w in args.only.split(",") if w]
        cases = [c for c in cases if any(w in c.name for w in wanted)]
    impls = [i for i in args.impls.split(",") if i]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    tune_keys = list(TUNE_CANDIDATES) if args.tune else []
    precompile(
        compile_jobs(
            cases + [c for k in tune_keys for c in TUNE_SHAPES[k]] + ABLATION_SHAPES,
            tuning=args.tune,
        ),
        args.workers,
    )

    env = environment()
    print(json.dumps(env), flush=True)
    ceilings, raw = measure_ceilings()
    ceilings = Ceilings(ceilings.copy_bytes_per_s, ceilings.matmul_flops_per_s)
    print(
        f"ceilings: copy {ceilings.copy_bytes_per_s / 1e12:.2f} TB/s, "
        f"matmul {ceilings.matmul_flops_per_s / 1e12:.0f} TFLOP/s",
        flush=True,
    )
    timer = Timer(budget_ms=args.budget_ms)
    payload: dict[str, Any] = {
        "date": _dt.date.today().isoformat(),
        "command": "python -m benchmarks.bench_decode " + " ".join(argv or sys.argv[1:]),
        "environment": env,
        "ceilings": ceilings.as_dict() | raw,
        "page_size": PAGE_SIZE,
        "planner": {"arch": "triton", "kv_granularity": 1, "num_cus": num_sms},
        "timing": "CUDA graph replay, L2 flushed (256 MiB read) before each replay, median",
        "cases": [],
    }
    if args.tune:
        payload["tuning"] = tune(timer=timer, num_sms=num_sms, keys=tune_keys)
    payload["decode_configs"] = {
        f"{k[0]}-{k[1]}": {**v, **LAUNCH_OPTIONS.get(k, {})} for k, v in tm.DECODE_CONFIGS.items()
    }
    if args.ablate:
        payload["ablation"] = ablate(timer=timer, num_sms=num_sms)
    for case in cases:
        try:
            record = run_case(case, ceilings=ceilings, timer=timer, num_sms=num_sms, impls=impls)
        except torch.cuda.OutOfMemoryError as exc:
            record = {"case": case.name, "skipped": f"out of memory ({str(exc).splitlines()[0]})"}
            torch.cuda.empty_cache()
        except Exception as exc:  # record and go on: one broken case must not lose the run
            record = {"case": case.name, "skipped": f"error {type(exc).__name__}: {exc}"[:300]}
            torch.cuda.empty_cache()
        payload["cases"].append(record)
        t, b = record.get("triton", {}), record.get("baseline", {})
        print(
            f"{case.name}: triton {_fmt_us(t)} {_pct(t.get('fraction_of_floor'))} of floor | "
            f"baseline {_fmt_us(b)} | sdpa {_fmt_us(record.get('sdpa', {}))} "
            f"[{time.perf_counter() - started:.0f} s]",
            flush=True,
        )
        write_reports(args.out, payload)  # after every case: a killed run keeps its results
    payload["wall_s"] = time.perf_counter() - started
    json_path, md_path = write_reports(args.out, payload)
    print(markdown_table(payload["cases"]))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
