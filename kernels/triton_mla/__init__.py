"""Triton persistent MLA decode over an AITER-v1 work plan, plus its reduce kernel.

The CUDA backend's decode: `persistent_mla_decode` launches one program per entry of the
plan's ``work_indptr`` (minus one); program ``c`` executes works
``work_indptr[c]..work_indptr[c+1]``. A work covers the virtual q rows ``[qo_start, qo_end)``
of virtual batch ``batch_idx`` (``heads_per_work`` heads each) and the kv token range
``[kv_start_token, batch_tokens - kv_offset)`` of real batch ``batch_idx // fold_ratio``.
Unsplit works (``partial_qo_loc == -1``) write the final bf16 output and natural-log LSE;
split works write the normalised fp32 partial output and LSE, which `mla_reduce` merges.

Kernel design (after FlashMLA's dense decode, deepseek-ai/FlashMLA ``csrc/sm90/decode/dense/``
and ``docs/20250422-new-kernel-deep-dive.md``): (q token × head) pairs are packed densely
into ``BLOCK_M`` rows; each KV tile is loaded once and ``kv[:, :512]`` serves both as Kᵀ for
QK and as V for PV, ``kv[:, 512:]`` only feeds the rope dot; ``sm_scale·q_scale·kv_scale·log2 e``
is folded into the score scale and the softmax uses exp2; the output is multiplied by
``kv_scale`` once at the end; accumulation is fp32. Dot operands: bf16 (fp8 q/KV converted to
bf16, which is exact); with e4m3 q and e4m3 KV on a GPU the QK dot takes the e4m3 operands
as they are and, when P is rounded to e4m3, PV runs in fp16 (e4m3 V and P are exact in fp16).
P is rounded to bf16 for the PV dot, or to e4m3 under AITER's fp8-q rule (`fp8_p`), with ΣP
unrounded. The causal mask is applied by kv position from the global rule: query token ``i``
of a request with ``s`` q tokens and ``L`` kv tokens sees positions ``[0, L - s + i]``. A row
that sees no kv token gets O = 0 and LSE = −inf.

Loop structure: the tiles below every row's causal limit and the work's kv end run unmasked
(no load masks, no score mask; the page id of the next tile is read one tile ahead, so
Triton's pipeliner gives the KV loads all of ``num_stages``); the last, partial tiles run
masked. Launch modes (`persistent_mla_decode`): one program per plan slice; or, to read each
KV range with several programs side by side (the second read mostly hits L2), a grid of
(head groups × slices) — for a folded plan with ``SPLIT_GROUPS`` (program g takes group g's
works of its slice) or ``PAIR_GROUPS`` (group g's works that start where the slice's group-0
works run, `kernels.plan_slice.paired_range`), or for an unfolded plan made for a divisor of
the head count, run once per head group. The reduce merges up to 16 partials
per step with a running max.

Triton 3.9's interpreter multiplies bf16 ``tl.dot`` operands as their raw uint16 bits, so under
the interpreter the (bf16-rounded) operands are widened to fp32 before each dot (``DOT_T``);
the values, and so the results, are the same as the bf16 dots on a GPU. (The interpreter also
truncates fp32→bf16 conversions where a GPU rounds to nearest.)

On an sm_90 GPU, a launch of 64-row blocks with bf16 q and KV, or of up to 64 rows with e4m3
q and KV, runs the Gluon decode instead (`kernels.gluon_mla`, chosen by `HOPPER_CONFIGS`;
``config={"GLUON": 0}`` keeps this package's kernel); the reduce is this package's either way.

Modules: `config` (dimensions, tile configurations, faults), `tile` (one KV tile of the
online softmax), `decode_kernel` (the persistent decode kernel), `reduce` (the reduce kernel
and `mla_reduce`), `launch` (`persistent_mla_decode`); a program's plan slice and a work's
bounds are `kernels.plan_slice`, which the Gluon decodes share. This package imports Triton
at import time; set ``TRITON_INTERPRET=1`` *before* Triton is first imported to run the
kernels on the CPU interpreter (`reload_kernels` re-decorates this package's kernels and the
plan slice after the variable changed, but Triton's own library functions, ``tl.min`` say,
keep the mode Triton was imported in).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from kernels.triton_mla.config import (
    CACHE_DIM,
    DECODE_CONFIGS,
    FAULTS,
    HOPPER_CONFIGS,
    LATENT_DIM,
    LOG2E,
    MAX_BLOCK_M,
    MIN_BLOCK_M,
    MMA_V3_MIN_ROWS,
    NARROW_BY_DEFAULT,
    NARROW_CONFIG,
    PAIR_BY_DEFAULT,
    REDUCE_CONFIGS,
    ROPE_DIM,
    WS_BY_DEFAULT,
    WS_CONFIGS,
    pairs_by_default,
    select_block_m,
    select_decode_config,
)
from kernels.triton_mla.launch import default_sm_scale, persistent_mla_decode
from kernels.triton_mla.reduce import mla_reduce
from kernels.triton_mla.tile import interpreted

# Import order: each module imports only those before it (`kernels.plan_slice` holds Triton
# device functions the decode kernel calls, so it is decorated anew too).
_MODULES = (
    "kernels.triton_mla.config",
    "kernels.triton_mla.tile",
    "kernels.plan_slice",
    "kernels.triton_mla.decode_kernel",
    "kernels.triton_mla.reduce",
    "kernels.triton_mla.launch",
)

__all__ = [
    "CACHE_DIM",
    "DECODE_CONFIGS",
    "FAULTS",
    "HOPPER_CONFIGS",
    "LATENT_DIM",
    "LOG2E",
    "MAX_BLOCK_M",
    "MIN_BLOCK_M",
    "MMA_V3_MIN_ROWS",
    "NARROW_BY_DEFAULT",
    "NARROW_CONFIG",
    "PAIR_BY_DEFAULT",
    "REDUCE_CONFIGS",
    "ROPE_DIM",
    "WS_BY_DEFAULT",
    "WS_CONFIGS",
    "default_sm_scale",
    "interpreted",
    "mla_reduce",
    "pairs_by_default",
    "persistent_mla_decode",
    "reload_kernels",
    "select_block_m",
    "select_decode_config",
]


def reload_kernels() -> ModuleType:
    """Re-import every module of the package and `kernels.plan_slice` (their kernels are
    decorated anew under the current ``TRITON_INTERPRET``) and return the package. Tuned
    tables are reset."""
    for name in _MODULES:
        importlib.reload(sys.modules[name])
    return importlib.reload(sys.modules[__name__])
