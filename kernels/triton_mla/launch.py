"""Host side of the decode: checks the inputs, picks the launch, runs decode then reduce.

`persistent_mla_decode` is `plan_launch` (check the inputs, pick the kernel, its config and
grid, allocate the partials) then `run_launch` (launch, retry, reduce).
Launch modes: one program per plan slice; or, to read each KV range
with several programs side by side (the second read mostly hits L2), a grid of (head groups ×
slices) — for a folded plan with ``SPLIT_GROUPS`` or ``PAIR_GROUPS`` (by default on Hopper
where `pairs_by_default` says so), or for an unfolded plan made for a divisor of the head
count, run once per head group. A config whose ``num_stages`` runs out of shared
memory is retried with one stage fewer (remembered per config).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

from conformance.persistent.plan import WorkPlan
from kernels import gluon_mla
from kernels.triton_mla.config import (
    CACHE_DIM,
    FP8_DTYPES,
    LATENT_DIM,
    LOG2E,
    MMA_V3_MIN_ROWS,
    NARROW_CONFIG,
    ROPE_DIM,
    WS_CONFIGS,
    check_fault,
    kv_kind,
    pairs_by_default,
    plan_on,
    select_block_m,
    select_decode_config,
)
from kernels.triton_mla.decode_kernel import persistent_mla_decode_kernel
from kernels.triton_mla.reduce import mla_reduce
from kernels.triton_mla.tile import interpreted

# num_stages that compiled, for configs whose requested depth ran out of shared memory.
_STAGE_LIMITS: dict[tuple[object, ...], int] = {}


def _scale_args(
    value: float | torch.Tensor, device: torch.device, name: str
) -> tuple[torch.Tensor | None, float]:
    """A per-tensor scale as (device tensor or None, host value).

    A Python float travels as a kernel argument (no device allocation, no extra launch); a
    one-element tensor is read on the device, without a host sync.
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a per-tensor scale (1 element), got {value.shape}")
        return value.reshape(1).to(device=device, dtype=torch.float32), 1.0
    return None, float(value)


def _index_tensor(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.to(device=device, dtype=torch.int32).contiguous()


@dataclass
class DecodeLaunch:
    """One decode launch as `plan_launch` decided it; `run_launch` runs it."""

    call: dict[str, Any]  # `persistent_mla_decode`'s arguments, for a retry
    plan: WorkPlan
    out: torch.Tensor
    lse: torch.Tensor
    partials: tuple[torch.Tensor, torch.Tensor]  # fp32 partial output and LSE the reduce merges
    args: tuple[Any, ...]  # the kernels' positional arguments
    shared: dict[str, Any]  # the constexprs both kernels take (num_warps set per try)
    cfg: dict[str, int]  # the tile configuration (the depth lowered on a retry)
    switches: dict[str, bool]  # the Triton kernel's compile-time switches
    grid: tuple[int, ...]
    use_gluon: bool
    use_ws: bool  # the warp-specialized Gluon decode (bf16 at 64 rows, no config; or WS: 1)
    use_narrow: bool  # the narrow Gluon decode (e4m3 at 16 or 32 rows, NARROW: 1)
    round_p: bool
    stage_key: tuple[object, ...]  # `_STAGE_LIMITS` key


def persistent_mla_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    plan: WorkPlan,
    *,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_lens: torch.Tensor,
    qo_indptr: torch.Tensor,
    page_size: int,
    sm_scale: float,
    q_scale: float | torch.Tensor = 1.0,
    kv_scale: float | torch.Tensor = 1.0,
    causal: bool = True,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    fp8_p: bool | None = None,
    config: dict[str, int] | None = None,
    _fault: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the persistent MLA decode kernel over `plan`, then the reduce; return (out, lse).

    q ``[tokens, H, 576]`` bf16 (or fp8 e4m3 with `q_scale`); kv_cache
    ``[num_blocks, page_size, 576]`` (a ``[num_blocks, page_size, 1, 576]`` view is accepted)
    bf16 or fp8 with `kv_scale`; output ``[tokens, H, 512]`` bf16 and LSE ``[tokens, H]`` fp32
    (natural log). ``H`` must equal ``plan.heads_per_work * plan.fold_ratio``, or be a multiple
    of ``plan.heads_per_work`` for an unfolded plan (``fold_ratio == 1``): the plan then runs
    once per group of ``heads_per_work`` heads, the groups' programs side by side. Scales are
    Python floats (kernel arguments) or one-element tensors (read on the device, no host
    sync). `fp8_p`: whether P is rounded to e4m3 before ``P @ V`` (the normaliser ΣP stays
    unrounded); None follows AITER (round iff q is fp8), as `kernels.plan_exec` does;
    otherwise P is rounded to bf16.
    `config` overrides the selected tile configuration (keys BLOCK_M, BLOCK_N, num_warps,
    num_stages) and takes launch options: SPLIT_GROUPS (a folded plan's head groups on
    programs side by side, each taking its group's works of one slice), PAIR_GROUPS (the
    same, each group's works matched to where group 0's of the slice run: `paired_range`),
    QK_FP8 / V_F16 (fp8 tensor-core paths, default on), F16_TILE / REG_PREFETCH (fp8 variants
    for fewer than 64 rows, default off), GLUON (0: the Triton kernel where a Hopper config
    exists), WS (1: the warp-specialized Gluon decode for bf16 or e4m3 q and KV, at 64 rows or
    e4m3 padded to 64; a config without it runs the other kernels), NARROW (1: the narrow
    Gluon decode for e4m3 q and KV at 16 or 32 rows), ABLATE (timing probes only: 1 drops the
    PV dot, 2 the QK dot; the results are wrong).
    Without `config`, the tables decide (`select_decode_config`): on Hopper a 64-row launch of
    a kind in `WS_BY_DEFAULT` runs the warp-specialized decode, and a folded plan takes
    PAIR_GROUPS where `pairs_by_default` says so.
    `_fault` is a test hook that selects a deliberately broken kernel (see `FAULTS`).
    """
    return run_launch(plan_launch(q, kv_cache, plan, **_keywords(locals())))


def _keywords(call: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in call.items() if k not in ("q", "kv_cache", "plan")}


def _check_shapes(
    q: torch.Tensor, kv_cache: torch.Tensor, plan: WorkPlan, page_size: int
) -> tuple[torch.Tensor, int]:
    """(the cache as [blocks, page, 576], head groups the plan runs for); ValueError if bad."""
    if q.dim() != 3 or q.shape[-1] != CACHE_DIM:
        raise ValueError(f"q must be [tokens, H, {CACHE_DIM}], got {tuple(q.shape)}")
    if kv_cache.dim() == 4 and kv_cache.shape[2] == 1:
        kv_cache = kv_cache.squeeze(2)
    if kv_cache.dim() != 3 or kv_cache.shape[1:] != (page_size, CACHE_DIM):
        raise ValueError(
            f"kv_cache must be [num_blocks, page_size={page_size}, {CACHE_DIM}], "
            f"got {tuple(kv_cache.shape)}"
        )
    if kv_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("q and kv_cache must be contiguous in their last dimension")
    if page_size < 1 or page_size & (page_size - 1):
        raise ValueError(f"page_size must be a power of two, got {page_size}")
    num_heads = q.shape[1]
    hpw = plan.heads_per_work
    if num_heads == hpw * plan.fold_ratio:
        return kv_cache, 1  # the plan covers every head
    if plan.fold_ratio == 1 and num_heads % hpw == 0:
        return kv_cache, num_heads // hpw  # one plan, run once per group of hpw heads
    raise ValueError(
        f"q has {num_heads} heads but the plan has heads_per_work={hpw} × "
        f"fold_ratio={plan.fold_ratio} (nor is it an unfolded plan for a divisor of "
        f"{num_heads} heads)"
    )


def _scales(
    q_scale: float | torch.Tensor, kv_scale: float | torch.Tensor, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor | None, float, float]:
    """(q tensor, kv tensor, q value, kv value): both tensors or neither (see `_scale_args`)."""
    q_scale_t, q_scale_v = _scale_args(q_scale, device, "q_scale")
    kv_scale_t, kv_scale_v = _scale_args(kv_scale, device, "kv_scale")
    if q_scale_t is not None or kv_scale_t is not None:  # both read on the device
        ones = torch.ones(1, dtype=torch.float32, device=device)
        q_scale_t = ones if q_scale_t is None else q_scale_t * 1.0
        kv_scale_t = ones if kv_scale_t is None else kv_scale_t * 1.0
        q_scale_t = q_scale_t * q_scale_v
        kv_scale_t = kv_scale_t * kv_scale_v
    return q_scale_t, kv_scale_t, q_scale_v, kv_scale_v


def _switches(
    cfg: dict[str, int], q: torch.Tensor, kv_cache: torch.Tensor, round_p: bool
) -> dict[str, bool]:
    """The Triton kernel's compile-time switches; pops their keys from `cfg`."""
    # e4m3 q and e4m3 KV: QK runs on fp8 tensor cores, no conversion (exact either way).
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    qk_fp8 = bool(
        cfg.pop("QK_FP8", True) and not interpreted() and q.dtype == kv_cache.dtype == e4m3
    )
    # e4m3 KV with P rounded to e4m3: V and P are exact in fp16, so PV runs on fp16 MMAs.
    v_f16 = bool(
        cfg.pop("V_F16", True) and not interpreted() and round_p and kv_cache.dtype == e4m3
    )
    # Fewer than 64 rows (mma.sync, no fp8 operands): e4m3 q and tile to fp16 once (off by
    # default: Triton then loads the tile synchronously, and it lost on the H200).
    f16_tile = bool(
        cfg.pop("F16_TILE", False) and qk_fp8 and round_p and cfg["BLOCK_M"] < MMA_V3_MIN_ROWS
    )
    if f16_tile:
        qk_fp8 = False
    # Tiles converted before their dots are not pipelined by Triton: they can be prefetched
    # by hand (off by default: it lost on the H200, see DECODE_CONFIGS).
    reg_prefetch = bool(cfg.pop("REG_PREFETCH", False))
    return {
        "QK_FP8": qk_fp8,
        "P_FP8": round_p,
        "V_F16": v_f16,
        "F16_TILE": f16_tile,
        "REG_PREFETCH": reg_prefetch,
    }


def plan_launch(
    q: torch.Tensor, kv_cache: torch.Tensor, plan: WorkPlan, **call: Any
) -> DecodeLaunch:
    """Check the inputs and decide the launch (`persistent_mla_decode`'s arguments)."""
    fault = check_fault(call["_fault"])
    kv_cache, head_groups = _check_shapes(q, kv_cache, plan, call["page_size"])
    device = q.device
    num_tokens, num_heads, _ = q.shape
    fp8_p, config = call["fp8_p"], call["config"]
    round_p = q.dtype in FP8_DTYPES if fp8_p is None else bool(fp8_p)
    plan = plan_on(plan, device)
    out, lse = call["out"], call["lse"]
    if out is None:
        out = torch.empty(num_tokens, num_heads, LATENT_DIM, dtype=torch.bfloat16, device=device)
    if lse is None:
        lse = torch.empty(num_tokens, num_heads, dtype=torch.float32, device=device)
    if out.shape != (num_tokens, num_heads, LATENT_DIM) or out.stride(-1) != 1:
        raise ValueError(f"out must be [{num_tokens}, {num_heads}, {LATENT_DIM}], got {out.shape}")
    if lse.shape != (num_tokens, num_heads):
        raise ValueError(f"lse must be [{num_tokens}, {num_heads}], got {tuple(lse.shape)}")

    seq_q = max(1, plan.max_seqlen_qo)
    partial_rows = plan.reduce_partial_map.numel() * seq_q
    part_heads = plan.heads_per_work * head_groups
    partial_o = torch.empty(
        partial_rows, part_heads, LATENT_DIM, dtype=torch.float32, device=device
    )
    partial_lse = torch.empty(partial_rows, part_heads, dtype=torch.float32, device=device)

    hopper = gluon_mla.usable(q, kv_cache, select_block_m(plan), interpreted())
    wanted = (config or {}).get("GLUON", 1)
    ws_open = not config and gluon_mla.ws_usable(q, kv_cache)  # no config chose a kernel
    narrow_open = not config and gluon_mla.narrow_usable(q, kv_cache, select_block_m(plan))
    cfg = dict(
        select_decode_config(plan, kv_cache.dtype, hopper and bool(wanted), ws_open, narrow_open)
    )
    if config:
        cfg.update(config)
    elif hopper and wanted and pairs_by_default(plan, len(call["kv_indptr"]) - 1, kv_cache.dtype):
        cfg["PAIR_GROUPS"] = 1
    use_gluon = bool(cfg.pop("GLUON", 0)) and hopper
    use_ws = bool(cfg.pop("WS", 0)) and use_gluon and gluon_mla.ws_usable(q, kv_cache)
    if use_ws:  # what the config leaves out from the WS kind's; 3 warpgroups of 4 warps
        ws_cfg = WS_CONFIGS[kv_kind(kv_cache.dtype)]
        cfg |= {k: v for k, v in ws_cfg.items() if k != "WS" and k not in (config or {})}
        cfg["num_warps"] = 4
    use_narrow = bool(cfg.pop("NARROW", 0)) and use_gluon and not use_ws
    use_narrow = use_narrow and gluon_mla.narrow_usable(q, kv_cache, cfg["BLOCK_M"])
    if use_narrow:  # what the config leaves out from NARROW_CONFIG
        cfg |= {k: v for k, v in NARROW_CONFIG.items() if k not in (config or {})}
        if cfg["num_warps"] not in (4, 8):
            raise ValueError(f"the narrow decode runs 4 or 8 warps, got {cfg['num_warps']}")
    elif use_gluon and not use_ws:  # two warpgroups, whatever warps a narrow config named
        cfg["num_warps"] = 8
    split_groups = bool(cfg.pop("SPLIT_GROUPS", False)) and plan.fold_ratio > 1
    pair_groups = bool(cfg.pop("PAIR_GROUPS", False)) and plan.fold_ratio > 1
    if head_groups > 1:
        group_mode, groups = 2, head_groups
    elif pair_groups:
        group_mode, groups = 3, plan.fold_ratio
    elif split_groups:
        group_mode, groups = 1, plan.fold_ratio
    else:
        group_mode, groups = 0, 1
    q_scale_t, kv_scale_t, q_scale_v, kv_scale_v = _scales(
        call["q_scale"], call["kv_scale"], device
    )
    switches = _switches(cfg, q, kv_cache, round_p)
    num_programs = plan.work_indptr.numel() - 1
    args = (
        q,
        kv_cache,
        out,
        lse,
        partial_o,
        partial_lse,
        plan.work_indptr,
        plan.work_info_set.contiguous(),
        _index_tensor(call["kv_indptr"], device),
        _index_tensor(call["kv_indices"], device),
        _index_tensor(call["kv_last_page_lens"], device),
        _index_tensor(call["qo_indptr"], device),
        q_scale_t if q_scale_t is not None else plan.work_indptr,
        kv_scale_t if kv_scale_t is not None else plan.work_indptr,
        q_scale_v,
        kv_scale_v,
        float(call["sm_scale"]) * LOG2E,
        q.stride(0),
        q.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        out.stride(0),
        out.stride(1),
        lse.stride(0),
        lse.stride(1),
        partial_o.stride(0),
        partial_o.stride(1),
        partial_lse.stride(0),
        partial_lse.stride(1),
        plan.heads_per_work,
        plan.fold_ratio,
        seq_q,
    )
    shared = {
        "PAGE_SIZE": call["page_size"],
        "CAUSAL": bool(call["causal"]),
        "D_V": LATENT_DIM,
        "D_R": ROPE_DIM,
        "SCALES_IN_MEMORY": q_scale_t is not None,
        "GROUP_MODE": group_mode,
        "FAULT": fault,
    }
    key = (*sorted(cfg.items()), use_gluon, use_ws, use_narrow, q.dtype, kv_cache.dtype,
           call["page_size"], round_p)  # fmt: skip
    return DecodeLaunch(
        call={"q": q, "kv_cache": kv_cache, "plan": plan, **call, "out": out, "lse": lse},
        plan=plan,
        out=out,
        lse=lse,
        partials=(partial_o, partial_lse),
        args=args,
        shared=shared,
        cfg=cfg,
        switches=switches,
        grid=(num_programs,) if group_mode == 0 else (groups, num_programs),
        use_gluon=use_gluon,
        use_ws=use_ws,
        use_narrow=use_narrow,
        round_p=round_p,
        stage_key=key,
    )


def _launch_once(launch: DecodeLaunch, cfg: dict[str, int]) -> None:
    shared = {**launch.shared, "BLOCK_N": cfg["BLOCK_N"], "num_warps": cfg["num_warps"]}
    if launch.use_gluon:
        dtype = launch.call["kv_cache"].dtype
        kernel = gluon_mla.kernel(dtype, ws=launch.use_ws, narrow=launch.use_narrow)
        rows = {}
        if launch.use_narrow:  # one or two warpgroups
            rows = {"ROWS": cfg["BLOCK_M"], "WARPGROUPS": cfg["num_warps"] // 4}
        kernel[launch.grid](
            *launch.args, **shared, STAGES=cfg["STAGES"], P_FP8=launch.round_p, **rows
        )
        return
    persistent_mla_decode_kernel[launch.grid](
        *launch.args,
        **shared,
        BLOCK_M=cfg["BLOCK_M"],
        DOT_T=tl.float32 if interpreted() else tl.bfloat16,
        **launch.switches,
        ABLATE=cfg.get("ABLATE", 0),
        num_stages=cfg["num_stages"],
    )


def run_launch(launch: DecodeLaunch) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the decode as `launch` says, then the reduce; return (out, lse).

    A config whose depth runs out of shared memory is retried one stage shallower (and
    remembered); a Gluon kernel that does not compile is disabled and the call re-planned
    for the Triton kernel.
    """
    cfg, plan = launch.cfg, launch.plan
    if launch.grid[-1] > 0 and plan.num_works > 0:
        depth = "STAGES" if launch.use_gluon else "num_stages"  # the Gluon kernel needs >= 2
        cfg[depth] = min(cfg[depth], _STAGE_LIMITS.get(launch.stage_key, cfg[depth]))
        while True:
            try:
                _launch_once(launch, cfg)
                break
            except CompilationError as exc:
                if not launch.use_gluon:
                    raise
                # Gluon's names move between Triton releases: run the Triton kernel instead.
                reason = f"Triton {triton.__version__}: {type(exc).__name__}: {exc}"[:300]
                if launch.use_ws or launch.use_narrow:  # the plain Gluon decode instead
                    return _retry_plain(launch, reason)
                gluon_mla.disable(reason)
                warnings.warn(
                    f"persistent_mla_decode: the Gluon decode does not compile ({reason}); "
                    "using the Triton kernel from now on",
                    stacklevel=3,
                )
                call = dict(launch.call)
                call["config"] = {**(call["config"] or {}), "GLUON": 0}
                return persistent_mla_decode(**call)
            except OutOfResources:
                if cfg[depth] <= (2 if launch.use_gluon else 1):
                    raise
                warnings.warn(
                    f"persistent_mla_decode: config {cfg} needs too much shared memory; "
                    f"using {depth}={cfg[depth] - 1}",
                    stacklevel=3,
                )
                cfg = {**cfg, depth: cfg[depth] - 1}
                _STAGE_LIMITS[launch.stage_key] = cfg[depth]
    mla_reduce(*launch.partials, plan, launch.out, launch.lse, _fault=launch.call["_fault"])
    return launch.out, launch.lse


# what a WS or narrow config sets for its kernel
_VARIANT_KEYS = ("WS", "NARROW", "BLOCK_N", "STAGES", "num_warps")


def _retry_plain(launch: DecodeLaunch, reason: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The launch again on the two-warpgroup Gluon decode, its variant disabled."""
    name, what = ("ws", "warp-specialized") if launch.use_ws else ("narrow", "narrow")
    gluon_mla.disable_variant(name, reason)
    warnings.warn(
        f"persistent_mla_decode: the {what} Gluon decode does not compile ({reason}); "
        "using the Gluon decode from now on",
        stacklevel=4,
    )
    call = dict(launch.call)  # the Gluon decode's own tile configuration
    call["config"] = {k: v for k, v in (call["config"] or {}).items() if k not in _VARIANT_KEYS}
    return persistent_mla_decode(**call)


def default_sm_scale() -> float:
    """DeepSeek's absorbed-MLA softmax scale, 1/sqrt(576)."""
    return 1.0 / math.sqrt(CACHE_DIM)
