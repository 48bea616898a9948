"""Dimensions, tile configurations and their selection, and the kernels' test-hook faults.

Host-side only (no Triton kernels here): `select_decode_config` picks the decode tile
configuration from `DECODE_CONFIGS` by (rows per program, KV kind); `REDUCE_CONFIGS` holds the
reduce's. Both tables can be tuned (``python -m benchmarks.bench_decode --tune``).
"""

from __future__ import annotations

import torch
import triton

from conformance.persistent.plan import WorkPlan

LATENT_DIM = 512  # kv_lora_rank: the V width and the "nope" part of the key
ROPE_DIM = 64  # qk_rope_head_dim
CACHE_DIM = LATENT_DIM + ROPE_DIM  # 576
LOG2E = 1.4426950408889634


# Test hooks: deliberately broken kernel variants used only by the negative controls in
# tests/selftest/kernels/test_triton_mla.py. Never pass `_fault` in production code.
FAULTS: dict[str | None, int] = {
    None: 0,
    "read_past_end": 1,  # decode reads whole pages up to kv_end, ignoring the last-page length
    "drop_kv_scale": 2,  # decode ignores kv_scale (in the scores and on the output)
    "skip_partial": 3,  # reduce skips the first partial of every group
    "skip_head_group": 4,  # head-group launches: the programs of group 1 skip every work
}

# Decode tile configurations keyed by (BLOCK_M, kv kind). BLOCK_M is the number of packed
# (q token × head) rows per program iteration. Tuned on an H200 (Triton 3.6, torch 2.11) by
# `python -m benchmarks.bench_decode --tune` (results: benchmarks/results/). Measured there:
# 8 warps beat 4 everywhere (4 warps spill the 255-register budget); BLOCK_N 64 beats 32
# (the page size: one page lookup per tile); 3 stages (2 KV buffers: the page id is read a
# tile ahead) where shared memory allows, 2 at 64 rows (Q alone takes 72 KiB). Optional
# keys: SPLIT_GROUPS and PAIR_GROUPS (folded plans: head groups on programs side by side),
# QK_FP8, V_F16, F16_TILE, REG_PREFETCH (fp8 code paths, see `persistent_mla_decode`).
DECODE_CONFIGS: dict[tuple[int, str], dict[str, int]] = {
    (16, "bf16"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    (32, "bf16"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    (64, "bf16"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
    (16, "fp8"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    (32, "fp8"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    (64, "fp8"): {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
}

# Hopper (sm_90) configurations of the Gluon decode (kernels/gluon_mla/), keyed like
# DECODE_CONFIGS; a key here runs the Gluon kernel where it is usable (bf16 q and KV at 64
# rows, or e4m3 q and KV at up to 64 rows, on an sm_90 GPU), the DECODE_CONFIGS entry
# everywhere else (bf16 q over an fp8 cache included). BLOCK_N tokens per tile, STAGES shared
# KV buffers (STAGES - 1 tiles in flight). A config passed with "GLUON": 0 forces the Triton
# kernel (benchmarks compare the two). Tuned on an H200 (Triton 3.6): bf16, 64 tokens and 2
# stages beat 32 tokens and 3 or 4 stages by 23 % at 128 heads; e4m3, the Gluon kernel beats
# the Triton kernel at every key (h16 B128 4k 197 vs 270 µs, h16 q_len 2 B128 16k 722 vs
# 1396 µs, h128 B128 8k 761 vs 830 µs). 2 stages measured about 1 % faster than 3 at e4m3;
# 3 stays until the whole `cuda` conformance set has run at 2 (benchmarks/results/).
HOPPER_CONFIGS: dict[tuple[int, str], dict[str, int]] = {
    (64, "bf16"): {"BLOCK_N": 64, "STAGES": 2, "num_warps": 8},
    (16, "fp8"): {"BLOCK_N": 64, "STAGES": 3, "num_warps": 8},
    (32, "fp8"): {"BLOCK_N": 64, "STAGES": 3, "num_warps": 8},
    (64, "fp8"): {"BLOCK_N": 64, "STAGES": 3, "num_warps": 8},
}

# The warp-specialized decode (kernels/gluon_mla/ws_kernel.py) by KV kind: a launch with
# ``WS: 1`` takes what its config leaves out from here. e4m3 fits six stages of 32 e4m3
# tokens (K and V as cached, 18 KiB each) beside two of V widened to fp16 and P; bf16 four.
WS_CONFIGS: dict[str, dict[str, int]] = {
    "bf16": {"WS": 1, "BLOCK_N": 32, "STAGES": 4, "num_warps": 4},
    "fp8": {"WS": 1, "BLOCK_N": 32, "STAGES": 6, "num_warps": 4},
}
# The narrow Gluon decode (kernels/gluon_mla/narrow_kernel.py): e4m3 q and KV at 16 or 32
# packed rows, tokens on the MMA rows; a launch with ``NARROW: 1`` takes what its config leaves
# out from here (4 or 8 warps: one or two warpgroups).
NARROW_CONFIG: dict[str, int] = {"BLOCK_N": 64, "STAGES": 3, "num_warps": 4}
# The e4m3 row counts whose launches take it wherever a launch leaves the choice open: 16 and
# 32, where it beat the two-warpgroup decode at every tuning shape (benchmarks/results/).
NARROW_BY_DEFAULT: tuple[int, ...] = (16, 32)
# The kinds whose 64-row launches take it wherever a launch leaves the choice open (no
# `config`), over their HOPPER_CONFIGS entry. bf16, measured on an H100 (Triton 3.6,
# benchmarks/results/2026-12-06-h100-ws-loader.md), once its loader kept up to STAGES tiles in
# flight: 6 % faster at 31 64-token tiles a program, 1.6 % at 248 and 496 (2.1 % and 2.4 % in
# a second run the same day). Before that change it lost at 248 and 496
# (benchmarks/results/2026-12-02-h200-ws.md) and was taken on short programs only.
WS_BY_DEFAULT: tuple[str, ...] = ("bf16",)
# The KV kinds whose Hopper launches over a folded plan take PAIR_GROUPS (head groups on
# programs side by side, each group's works matched to where group 0's of the slice run)
# wherever a launch leaves the choice open, if the batch's requests times head groups number
# at least the plan's programs: each request then fits in about one slice and the programs of
# a pair carry about equal shares (with longer requests they do not: a pair can hold a whole
# request beside an almost idle pair).
PAIR_BY_DEFAULT: tuple[str, ...] = ()

# Reduce configurations: partials merged per step (BLOCK_K) and heads per program (BLOCK_H).
# On a GPU one head per program and 16 partials per step (a 32 KiB load); under the
# interpreter, whose cost is per program and per op, 16 heads per program.
REDUCE_CONFIGS: dict[str, dict[str, int]] = {
    "gpu": {"BLOCK_K": 16, "BLOCK_H": 1, "num_warps": 4},
    "interpreter": {"BLOCK_K": 4, "BLOCK_H": 16, "num_warps": 4},
}


# 64 × 512 fp32 accumulator rows is the register budget: O alone is 128 registers a thread
# at 256 threads (FlashMLA's dense decode packs at most 64 rows the same way)
MAX_BLOCK_M = 64
MMA_V3_MIN_ROWS = 64  # fewer rows per program compile to mma.sync (no fp8 operands) on sm_90
MIN_BLOCK_M = 16  # tl.dot needs M ≥ 16

FP8_DTYPES = tuple(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2")
    if hasattr(torch, name)
)


def kv_kind(dtype: torch.dtype) -> str:
    """``"fp8"`` for an 8-bit float dtype, else ``"bf16"`` (the DECODE_CONFIGS key)."""
    return "fp8" if dtype in FP8_DTYPES else "bf16"


def select_block_m(plan: WorkPlan) -> int:
    """Packed rows per program iteration: next power of two of the largest tile, in [16, 64]."""
    rows = max(1, plan.max_seqlen_qo * plan.heads_per_work)
    return max(MIN_BLOCK_M, min(MAX_BLOCK_M, triton.next_power_of_2(rows)))


def select_decode_config(
    plan: WorkPlan,
    kv_dtype: torch.dtype,
    hopper: bool = False,
    warp_specialized: bool = False,
    narrow: bool = False,
) -> dict[str, int]:
    """The decode tile configuration (BLOCK_M, BLOCK_N, num_warps, num_stages) for a case;
    with `hopper`, the Gluon kernel's (``GLUON: 1``, BLOCK_N, STAGES) where it has one; with
    `warp_specialized` too the warp-specialized one's (`WS_CONFIGS`) at 64 rows of a kind in
    `WS_BY_DEFAULT`, with `narrow` the narrow one's (`NARROW_CONFIG`) at e4m3 rows in
    `NARROW_BY_DEFAULT`."""
    block_m = select_block_m(plan)
    key = (block_m, kv_kind(kv_dtype))
    if hopper and warp_specialized and block_m == MAX_BLOCK_M and key[1] in WS_BY_DEFAULT:
        return {"BLOCK_M": block_m, "GLUON": 1, **WS_CONFIGS[key[1]]}
    if hopper and narrow and key[1] == "fp8" and block_m in NARROW_BY_DEFAULT:
        return {"BLOCK_M": block_m, "GLUON": 1, "NARROW": 1, **NARROW_CONFIG}
    if hopper and key in HOPPER_CONFIGS:
        return {"BLOCK_M": block_m, "GLUON": 1, **HOPPER_CONFIGS[key]}
    return {"BLOCK_M": block_m, **DECODE_CONFIGS[key]}


def pairs_by_default(plan: WorkPlan, batch: int, kv_dtype: torch.dtype) -> bool:
    """Whether a Hopper launch of `plan` over `batch` requests takes PAIR_GROUPS by default."""
    programs = plan.work_indptr.numel() - 1
    return (
        kv_kind(kv_dtype) in PAIR_BY_DEFAULT
        and plan.fold_ratio > 1
        and batch * plan.fold_ratio >= programs
    )


def plan_on(plan: WorkPlan, device: torch.device) -> WorkPlan:
    """`plan` with its tensors on `device` (the same object when they already are)."""
    if plan.work_indptr.device == device:
        return plan
    return plan.to(device)


def check_fault(fault: str | None) -> int:
    """The FAULT constexpr of a `_fault` test-hook name (see `FAULTS`)."""
    if fault not in FAULTS:
        raise ValueError(f"_fault must be one of {sorted(k for k in FAULTS if k)}, got {fault!r}")
    return FAULTS[fault]
