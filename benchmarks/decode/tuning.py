"""``--tune`` and ``--ablate``: candidate tile configurations timed, 128-head timing probes.

`tune` times every candidate of `TUNE_CANDIDATES` on its `TUNE_SHAPES` and installs the
fastest correct one (geometric mean) in `kernels.triton_mla.DECODE_CONFIGS`, or in
`HOPPER_CONFIGS` when it is a Gluon config (and a PLAN_HEADS launch option in
`LAUNCH_OPTIONS`) for the rest of the run; `ablate` times the
128-head kernel without its PV dot and without its QK dot (results wrong: timing only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from benchmarks.decode.cases import (
    ABLATION_SHAPES,
    LAUNCH_OPTIONS,
    TUNE_CANDIDATES,
    TUNE_SHAPES,
    split_launch,
)
from benchmarks.decode.impls import plan_for, triton_impl
from benchmarks.decode.inputs import make_batch, reference_rows
from benchmarks.decode.record import errors
from benchmarks.decode.report import fmt_us
from benchmarks.decode.timing import Timer


def tune(*, timer: Timer, num_sms: int, keys: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """Time every candidate config on its shapes; install the fastest in DECODE_CONFIGS."""
    import torch

    from kernels import gluon_mla
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
                    run = triton_impl(
                        batch, plans[plan_heads], {"BLOCK_M": key[0], **kernel_cfg}
                    ).run
                    out, lse = run()
                    torch.cuda.synchronize()
                    for key_name, name in (("WS", "ws"), ("NARROW", "narrow")):
                        reason = gluon_mla.variant_disabled_reason(name)
                        if (kernel_cfg or {}).get(key_name) and reason:
                            raise RuntimeError(f"{key_name} fell back: {reason}")
                    entry |= errors(out, lse, ref_rows, ref_out, ref_lse)
                    entry |= timer(run)
                except Exception as exc:  # a config that does not compile or run
                    entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append(entry)
                print(f"  tune {key} {case.name} {cfg}: {fmt_us(entry)}", flush=True)
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
            kernel_cfg = dict(kernel_cfg or {})
            if kernel_cfg.pop("GLUON", 0):  # the Gluon kernel (where it is usable)
                tm.HOPPER_CONFIGS[key] = kernel_cfg
            else:
                tm.HOPPER_CONFIGS.pop(key, None)
                tm.DECODE_CONFIGS[key] = kernel_cfg
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
                entry |= timer(triton_impl(batch, plan, {**base, "ABLATE": probe}).run)
            except Exception as exc:
                entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(entry)
            print(f"  ablate {case.name} {what}: {fmt_us(entry)}", flush=True)
        del batch, plan
        torch.cuda.empty_cache()
    return rows
