"""The benchmark's grid of decode cases and the tile configurations ``--tune`` tries.

DeepSeek-R1 dims (576-wide cache rows, 512 latent), page 64. `quick_grid` is the case table of
the side-by-side comparison with FlashInfer (q_len 1) plus one MTP case; `full_grid` sweeps
heads {16, 128} × KV {bf16, fp8} × batch {1, 32, 128} × context {1k, 4k, 16k, 64k} × q_len
{1, 2}, plus 128 heads at 8k and the side-by-side table's other shapes.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

PAGE_SIZE = 64
SM_SCALE = 1.0 / math.sqrt(576)
Q_SCALE_FP8 = 0.25
KV_SCALE_FP8 = 0.5


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
    """The whole sweep plus 128 heads, B=128 at 8k, and the side-by-side table's shapes."""
    cases = [
        Case(h, kv, b, L, s)
        for h, kv, b, L, s in itertools.product(
            (16, 128), ("bf16", "fp8"), (1, 32, 128), (1024, 4096, 16384, 65536), (1, 2)
        )
    ]
    cases += [Case(128, kv, 128, 8192, s) for kv in ("bf16", "fp8") for s in (1, 2)]
    cases += [c for c in quick_grid() if c not in cases]  # B64 32k, B256 2k
    return sorted(cases, key=lambda c: (c.heads, c.kv_format, c.q_len, c.batch, c.context))


# (heads, KV format, batch, context): the side-by-side table, every row at q_len 1.
PEER_TABLE = (
    (16, "bf16", 128, 4096),
    (16, "bf16", 128, 16384),
    (16, "fp8", 128, 4096),
    (16, "fp8", 128, 16384),
    (128, "bf16", 128, 8192),
    (128, "fp8", 128, 8192),
    (128, "bf16", 32, 4096),
    (16, "bf16", 32, 65536),
    (128, "bf16", 1, 16384),
    (16, "bf16", 1, 4096),
    (128, "fp8", 32, 4096),
    (128, "bf16", 64, 32768),  # long contexts at 128 heads
    (128, "bf16", 128, 1024),  # short contexts: works never split
    (16, "bf16", 256, 2048),  # many requests
)
# (heads, KV format, batch, context): the planner's table (benchmarks/bench_planner_cases.py),
# the side-by-side table and the many-request batches the planner goal names (B = 1024).
PLANNER_TABLE = (*PEER_TABLE, (16, "bf16", 1024, 4096), (128, "bf16", 1024, 4096))


def quick_grid() -> list[Case]:
    """The side-by-side table (`PEER_TABLE`) and one MTP case (128 heads, q_len 2)."""
    return [Case(h, kv, b, L, 1) for h, kv, b, L in PEER_TABLE] + [Case(128, "bf16", 32, 4096, 2)]


# Tile configurations tried by --tune, keyed like kernels.triton_mla.DECODE_CONFIGS
# (rows per program, KV format); each is timed on the shapes of TUNE_SHAPES. Launch keys:
# PAIR_GROUPS (a folded plan's head groups on programs side by side, kernels.triton_mla),
# PLAN_HEADS (the benchmark plans for that many heads and the kernel runs the plan once per
# head group).
_N64 = {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
_PREFETCH = {"REG_PREFETCH": 1}
_TRITON = {"GLUON": 0}  # the plain-Triton kernel where a Hopper (Gluon) config exists
_GLUON = {"GLUON": 1, "num_warps": 8}  # kernels/gluon_mla (kernels.triton_mla.HOPPER_CONFIGS)
_N64_FP8 = {"BLOCK_N": 64, "STAGES": 3}  # the e4m3 Gluon kernel: 64-token tiles, 3 stages
# The warp-specialized bf16 Gluon decode (kernels/gluon_mla/ws_kernel.py): 3 warpgroups of 4
_WS = {"GLUON": 1, "WS": 1, "BLOCK_N": 32, "STAGES": 4, "num_warps": 4}
_WS_FP8 = _WS | {"STAGES": 6}  # e4m3: six e4m3 stages fit beside two of fp16 V
# The narrow e4m3 Gluon decode (kernels/gluon_mla/narrow_kernel.py): 16 or 32 rows, 4 warps
_NARROW = {"GLUON": 1, "NARROW": 1, "BLOCK_N": 64, "STAGES": 3, "num_warps": 4}
TUNE_CANDIDATES: dict[tuple[int, str], list[dict[str, int]]] = {
    (16, "bf16"): [_N64, {"BLOCK_N": 32, "num_warps": 4, "num_stages": 4}],
    (16, "fp8"): [
        _N64 | _TRITON,
        _N64 | _PREFETCH | _TRITON,
        _N64 | _PREFETCH | _TRITON | {"F16_TILE": 1},
        _GLUON | _N64_FP8,
        _GLUON | _N64_FP8 | {"STAGES": 2},
        _WS_FP8,
        _NARROW,
        _NARROW | {"STAGES": 2},
        _NARROW | {"num_warps": 8},
    ],
    (32, "bf16"): [_N64, _N64 | {"BLOCK_N": 32, "num_stages": 4}],
    (32, "fp8"): [
        _N64 | _TRITON,
        _N64 | _PREFETCH | _TRITON,
        _GLUON | _N64_FP8,
        _GLUON | _N64_FP8 | {"STAGES": 2},
        _WS_FP8,
        _NARROW,
        _NARROW | {"STAGES": 2},
        _NARROW | {"num_warps": 8},
    ],
    # 64 rows: the Gluon decodes, over the backend's plan with and without PAIR_GROUPS, and
    # the WS decode over a 64-head plan (not the backend's: how far reading each KV range
    # once gets). The Triton kernel, 32-token two-warpgroup tiles, SPLIT_GROUPS and the other
    # WS depths lost at every shape in earlier runs (benchmarks/results/2026-12-06-h100-*).
    (64, "bf16"): [
        _GLUON | {"BLOCK_N": 64, "STAGES": 2},
        _GLUON | {"BLOCK_N": 64, "STAGES": 2, "PAIR_GROUPS": 1},
        _WS,
        _WS | {"PAIR_GROUPS": 1},
        _WS | {"PLAN_HEADS": 64},
    ],
    (64, "fp8"): [
        _GLUON | _N64_FP8,
        _GLUON | _N64_FP8 | {"STAGES": 2},
        _GLUON | _N64_FP8 | {"PAIR_GROUPS": 1},
        _GLUON | _N64_FP8 | {"PLAN_HEADS": 64},
        _WS_FP8,
        _WS_FP8 | {"PAIR_GROUPS": 1},
    ],
}
# Launch options the harness applies itself (PLAN_HEADS), per config key, set by --tune.
LAUNCH_OPTIONS: dict[tuple[int, str], dict[str, int]] = {}

TUNE_SHAPES: dict[tuple[int, str], list[Case]] = {
    (16, "bf16"): [Case(16, "bf16", 128, 4096, 1), Case(16, "bf16", 128, 16384, 1)],
    (16, "fp8"): [Case(16, "fp8", 128, 4096, 1), Case(16, "fp8", 128, 16384, 1)],
    (32, "bf16"): [Case(16, "bf16", 128, 16384, 2)],
    (32, "fp8"): [Case(16, "fp8", 128, 16384, 2)],
    (64, "bf16"): [
        Case(128, "bf16", 128, 8192, 1),
        Case(128, "bf16", 32, 4096, 1),
        Case(128, "bf16", 64, 32768, 1),  # long programs (496 tiles a program)
        Case(128, "bf16", 128, 2048, 1),  # 62 tiles a program
    ],
    (64, "fp8"): [Case(128, "fp8", 128, 8192, 1), Case(128, "fp8", 32, 4096, 1)],
}
# Timing probes at 128 heads (ABLATE: 1 = no PV dot, 2 = no QK dot): where the time goes.
ABLATION_SHAPES = [Case(128, "bf16", 128, 8192, 1), Case(128, "fp8", 128, 8192, 1)]


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
