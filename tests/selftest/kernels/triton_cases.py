"""Inputs, hand-made plans and the fp64 reference of the Triton kernel selftests.

Loaded by test_triton_mla.py with ``runpy`` (it is not a test module). Importing it sets
``TRITON_INTERPRET=1`` on a machine without CUDA before Triton is imported (and re-decorates
the kernels if they were imported without it), so the kernels run on the CPU interpreter;
with CUDA they run natively. `make_case` draws a NaN-poisoned paged batch, `hand_plan` makes
a plan from `Tile`s, `planned` one from the suite's planner, `check` runs the kernels and
compares with `reference` (error model: test_triton_mla.py).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pytest
import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"

pytest.importorskip("triton", reason="triton is not installed; the Triton MLA kernels need it")

import kernels.triton_mla as tm  # noqa: E402
from conformance.persistent.plan import WorkPlan  # noqa: E402

if not ON_GPU and not os.environ.get("TRITON_INTERPRET") == "1":  # pragma: no cover
    pytest.skip("TRITON_INTERPRET was unset after import", allow_module_level=True)
if not ON_GPU and not tm.interpreted():
    tm = tm.reload_kernels()  # imported earlier without the interpreter: decorate again

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
FP8 = getattr(torch, "float8_e4m3fn", None)
BF16_REL_ERR = 2.0**-7  # one bf16 ulp, relative
LSE_ABS_TOL = 1e-4
# q ~ N(0, 1) and k ~ N(0, 0.01) give scores of std ≈ 1.2 with this scale: a softmax far from
# uniform, so a missing rescale, mask or rope term changes the output well beyond tolerance.
SM_SCALE = 0.5


# --------------------------------------------------------------------------------------------
# Inputs, plans, reference
# --------------------------------------------------------------------------------------------


@dataclass
class MlaCase:
    """One decode problem: inputs in kernel layout plus the reference's dequantised view."""

    q: torch.Tensor
    kv_cache: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_lens: torch.Tensor
    qo_indptr: torch.Tensor
    kv_lens: list[int]
    q_len: int
    page_size: int
    q_scale: float
    kv_scale: float

    def launch_kwargs(self) -> dict[str, object]:
        """Keyword arguments for `persistent_mla_decode`."""
        names = ("kv_indptr", "kv_indices", "kv_last_page_lens", "qo_indptr", "page_size")
        kwargs = {name: getattr(self, name) for name in (*names, "q_scale", "kv_scale")}
        return kwargs | {"sm_scale": SM_SCALE}


def make_case(
    kv_lens: list[int],
    *,
    q_len: int,
    num_heads: int,
    page_size: int,
    kv_dtype: torch.dtype = torch.bfloat16,
    kv_scale: float = 1.0,
    q_dtype: torch.dtype = torch.bfloat16,
    q_scale: float = 1.0,
    seed: int = 0,
) -> MlaCase:
    """Random q and paged cache (permuted pages, NaN past every sequence and in spare pages)."""
    gen = torch.Generator().manual_seed(seed)
    pages = [math.ceil(n / page_size) for n in kv_lens]
    total_pages = sum(pages)
    num_blocks = total_pages + 3
    physical = torch.randperm(num_blocks, generator=gen)[:total_pages]
    cache = (torch.randn(num_blocks, page_size, 576, generator=gen) / 10).clamp(-1, 1)
    cache = cache / kv_scale
    cache.fill_(float("nan"))  # every slot poisoned, valid tokens written below
    values = (torch.randn(total_pages * page_size, 576, generator=gen) / 10).clamp(-1, 1)
    cursor = 0
    for b, n in enumerate(kv_lens):
        for p in range(n):
            page = int(physical[sum(pages[:b]) + p // page_size])
            cache[page, p % page_size] = values[cursor] / kv_scale
            cursor += 1
    q = torch.randn(len(kv_lens) * q_len, num_heads, 576, generator=gen).clamp(-4, 4)
    kv_indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32)
    last = [n - (p - 1) * page_size if p else 0 for n, p in zip(kv_lens, pages, strict=True)]
    return MlaCase(
        q=(q / q_scale).to(q_dtype).to(DEVICE),
        kv_cache=cache.to(kv_dtype).to(DEVICE),
        kv_indptr=kv_indptr.to(DEVICE),
        kv_indices=physical.to(torch.int32).to(DEVICE),
        kv_last_page_lens=torch.tensor(last, dtype=torch.int32).to(DEVICE),
        qo_indptr=(torch.arange(len(kv_lens) + 1, dtype=torch.int32) * q_len).to(DEVICE),
        kv_lens=list(kv_lens),
        q_len=q_len,
        page_size=page_size,
        q_scale=q_scale,
        kv_scale=kv_scale,
    )


def gather_kv(case: MlaCase, batch: int) -> torch.Tensor:
    """Dequantised kv tokens ``[L, 576]`` (fp64, kv_scale applied) of one request."""
    indptr = case.kv_indptr.tolist()
    indices = case.kv_indices.tolist()
    rows = []
    for p in range(case.kv_lens[batch]):
        page = indices[indptr[batch] + p // case.page_size]
        rows.append(case.kv_cache[page, p % case.page_size].double().cpu())
    if not rows:
        return torch.zeros(0, 576, dtype=torch.float64)
    return torch.stack(rows) * case.kv_scale


def reference(case: MlaCase, *, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 monolithic causal MLA decode: (out [T, H, 512], lse [T, H]); empty rows → 0, −inf."""
    q = case.q.double().cpu() * case.q_scale
    tokens, heads, _ = q.shape
    out = torch.zeros(tokens, heads, 512, dtype=torch.float64)
    lse = torch.full((tokens, heads), float("-inf"), dtype=torch.float64)
    s = case.q_len
    for b, kv_len in enumerate(case.kv_lens):
        kv = gather_kv(case, b)
        for i in range(s):
            t = b * s + i
            visible = kv_len - s + i + 1 if causal else kv_len
            if visible <= 0:
                continue
            k = kv[:visible]
            scores = q[t] @ k.T * SM_SCALE  # [H, visible]
            lse[t] = torch.logsumexp(scores, dim=-1)
            out[t] = torch.softmax(scores, dim=-1) @ k[:, :512]
    return out, lse


E4M3_P_REL_ERR = 2.0**-3  # P rounded to e4m3 (AITER's fp8-q rule): one e4m3 ulp


def fp8_case(kv_lens: list[int], **kwargs: object) -> MlaCase:
    """`make_case` with e4m3 q and KV and non-unit scales (the fp8 Gluon kernels' inputs)."""
    e4m3 = {"kv_dtype": FP8, "kv_scale": 0.5, "q_dtype": FP8, "q_scale": 0.25}
    return make_case(kv_lens, **(e4m3 | kwargs))


def check_fp8(case: MlaCase, plan: WorkPlan, *, fp8_p: bool = True, **kwargs: object):
    """`check` of an e4m3 case: P's rounding (e4m3 by default) and the fp8 QK MMA's error."""
    p_rel_err = E4M3_P_REL_ERR if fp8_p else BF16_REL_ERR
    return check(case, plan, fp8_p=fp8_p, p_rel_err=p_rel_err,
                 score_err=fp8_mma_score_err(case), **kwargs)  # fmt: skip


def fp8_mma_score_err(case: MlaCase) -> float:
    """Bound of the score error of an fp8 tensor-core ``Q Kᵀ`` on `case` (natural-log units).

    The conformance error model's term (conformance/numerics/tolerances.py): each of the
    ceil(576 / 32) accumulation steps of Hopper's fp8 ``wgmma`` may lose 2⁻¹⁴ of the running
    magnitude, at most max Σ|q_i k_i| · scale over the case's rows and tokens.
    """
    from conformance.numerics.tolerances import FP8_MMA_K, U_FP8_MMA

    q = case.q.double().cpu().abs() * case.q_scale
    s1 = 0.0
    for b, kv_len in enumerate(case.kv_lens):
        if kv_len:
            rows = q[b * case.q_len : (b + 1) * case.q_len].reshape(-1, q.shape[-1])
            s1 = max(s1, float((rows @ gather_kv(case, b).abs().T).max()) * SM_SCALE)
    return math.ceil(q.shape[-1] / FP8_MMA_K) * U_FP8_MMA * s1


@dataclass
class Tile:
    """A qo tile of a hand-made plan: virtual batch, virtual q rows, kv page cut points."""

    vbatch: int
    qo_start: int
    qo_end: int
    cuts: tuple[int, ...] = ()  # page counts (relative to the batch) where the kv is split


def hand_plan(
    case: MlaCase,
    tiles: list[Tile],
    *,
    num_programs: int,
    heads_per_work: int,
    fold_ratio: int = 1,
) -> WorkPlan:
    """An AITER-v1-layout plan for `tiles`; works are dealt to programs in contiguous chunks."""
    indptr = case.kv_indptr.tolist()
    works: list[list[int]] = []
    reduce_indptr = [0]
    final_map: list[tuple[int, int]] = []
    partial_map: list[int] = []
    ts = max(t.qo_end - t.qo_start for t in tiles)
    next_loc = 0
    for tile in tiles:
        b = tile.vbatch // fold_ratio
        num_pages = indptr[b + 1] - indptr[b]
        bounds = [0, *tile.cuts, num_pages]
        split = len(bounds) > 2
        for lo, hi in itertools.pairwise(bounds):
            loc = -1
            if split:
                loc = next_loc
                partial_map.append(loc)
                next_loc += ts
            kv_offset = case.kv_lens[b] - min(hi * case.page_size, case.kv_lens[b])
            works.append(
                [tile.vbatch, loc, tile.qo_start, tile.qo_end, indptr[b] + lo, indptr[b] + hi,
                 kv_offset, 0]
            )  # fmt: skip
        reduce_indptr.append(len(partial_map))
        final_map.append((tile.qo_start, tile.qo_end) if split else (-1, -2))
    chunk = math.ceil(len(works) / num_programs)
    work_indptr = [min(c * chunk, len(works)) for c in range(num_programs + 1)]
    as_i32 = {"dtype": torch.int32}
    return WorkPlan(
        work_indptr=torch.tensor(work_indptr, **as_i32),
        work_info_set=torch.tensor(works, **as_i32).reshape(-1, 8),
        reduce_indptr=torch.tensor([*reduce_indptr, len(partial_map)], **as_i32),
        reduce_final_map=torch.tensor([*final_map, (-1, -2)], **as_i32),
        reduce_partial_map=torch.tensor(partial_map or [0], **as_i32),
        num_works=len(works),
        num_partials=len(partial_map),
        num_tiles=len(tiles),
        fold_ratio=fold_ratio,
        heads_per_work=heads_per_work,
        max_seqlen_qo=case.q_len,
        params={"source": "hand_plan"},
    )


def run(case: MlaCase, plan: WorkPlan, *, causal: bool = True, **kwargs: object):
    """Launch into NaN-prefilled outputs (so unwritten rows show) and return them on the CPU;
    `kwargs` add to or override the case's launch arguments."""
    tokens, heads, _ = case.q.shape
    out = torch.full((tokens, heads, 512), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    lse = torch.full((tokens, heads), float("nan"), dtype=torch.float32, device=DEVICE)
    tm.persistent_mla_decode(
        case.q, case.kv_cache, plan, causal=causal, out=out, lse=lse,
        **(case.launch_kwargs() | kwargs),
    )  # fmt: skip
    return out.double().cpu(), lse.double().cpu()


def assert_matches_reference(
    *,
    out: torch.Tensor,
    lse: torch.Tensor,
    ref_out: torch.Tensor,
    ref_lse: torch.Tensor,
    v_max: float,
    p_rel_err: float = BF16_REL_ERR,
    score_err: float = 0.0,
) -> None:
    """Check out/lse against the fp64 reference with the error model of the module docstring.

    `p_rel_err` is the relative error of the rounding of P before ``P @ V``; `score_err` a
    bound of the absolute score error (`fp8_mma_score_err`), which moves LSE by as much and
    O by at most twice as much times the largest value.
    """
    __tracebackhide__ = True
    assert torch.isfinite(out).all(), (
        f"non-finite output at {(~torch.isfinite(out)).nonzero()[:5].tolist()}"
    )
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), (
        f"lse=-inf at {torch.isneginf(lse).nonzero().tolist()}, "
        f"expected at {empty.nonzero().tolist()}"
    )
    assert not torch.isnan(lse).any(), f"NaN lse at {torch.isnan(lse).nonzero()[:5].tolist()}"
    assert (out[empty] == 0).all(), "rows with no visible kv must have O = 0"
    tol = p_rel_err * v_max + BF16_REL_ERR * ref_out.abs() + (1e-5 + 2 * score_err) * v_max
    err = (out - ref_out).abs()
    worst = (err - tol).argmax()
    assert (err <= tol).all(), (
        f"|O - ref| exceeds tolerance at flat index {int(worst)}: err={err.flatten()[worst]:.3e}, "
        f"tol={tol.flatten()[worst]:.3e}, ref={ref_out.flatten()[worst]:.4f}"
    )
    finite = ~empty
    lse_err = (lse[finite] - ref_lse[finite]).abs().max() if finite.any() else torch.tensor(0.0)
    lse_tol = LSE_ABS_TOL + score_err
    assert lse_err <= lse_tol, f"max |lse - ref| = {float(lse_err):.3e} > {lse_tol:.3e}"


def check(
    case: MlaCase,
    plan: WorkPlan,
    *,
    causal: bool = True,
    p_rel_err: float = BF16_REL_ERR,
    score_err: float = 0.0,
    **kwargs: object,
) -> torch.Tensor:
    """Run the kernel on `plan`, assert it matches the fp64 reference; return the output."""
    __tracebackhide__ = True
    out, lse = run(case, plan, causal=causal, **kwargs)
    ref_out, ref_lse = reference(case, causal=causal)
    v_max = max((gather_kv(case, b)[:, :512].abs().max().item() for b in range(len(case.kv_lens))
                 if case.kv_lens[b]), default=0.0)  # fmt: skip
    assert_matches_reference(
        out=out,
        lse=lse,
        ref_out=ref_out,
        ref_lse=ref_lse,
        v_max=v_max,
        p_rel_err=p_rel_err,
        score_err=score_err,
    )
    return out


def unfolded_tiles(case: MlaCase, cuts: dict[int, tuple[int, ...]]) -> list[Tile]:
    """One qo tile per batch covering all its q tokens, split at `cuts[b]`."""
    s = case.q_len
    return [Tile(b, b * s, (b + 1) * s, cuts.get(b, ())) for b in range(len(case.kv_lens))]


def planned(case: MlaCase, *, arch: str, num_cus: int, causal: bool = True) -> WorkPlan:
    """A plan from the suite's planner (kv granularity one page, so tiny contexts split)."""
    from conformance.persistent import plan_persistent_decode

    return plan_persistent_decode(
        case.qo_indptr.cpu(), case.kv_indptr.cpu(), case.kv_last_page_lens.cpu(),
        num_heads_q=case.q.shape[1], max_seqlen_qo=case.q_len, uni_seqlen_qo=case.q_len,
        page_size=case.page_size, kv_granularity=1, causal=causal,
        max_split_per_batch=-1, q_dtype=case.q.dtype, kv_dtype=case.kv_cache.dtype, arch=arch,
        num_cus=num_cus,
    )  # fmt: skip


# The Gluon (Hopper) decodes' selftests (test_gluon_mla.py): where they run, and which kernel
# each launch took.

T = TypeVar("T")
ON_HOPPER = ON_GPU and torch.version.hip is None and torch.cuda.get_device_capability()[0] == 9


def hopper_only() -> list[pytest.MarkDecorator]:
    """The marks of a Gluon selftest module: an sm_90 GPU and a Triton with Gluon."""
    from kernels import gluon_mla

    return [
        pytest.mark.skipif(not ON_HOPPER, reason="the Gluon decode needs an sm_90 (Hopper) GPU"),
        pytest.mark.skipif(
            not gluon_mla.gluon_importable(), reason="this Triton has no Gluon Hopper module"
        ),
    ]


def spy_gluon_kernel(
    monkeypatch: pytest.MonkeyPatch, entry: Callable[[torch.dtype, bool, bool], T]
) -> list[T]:
    """Record ``entry(kv_dtype, ws, narrow)`` for each Gluon kernel a launch takes (a test
    asserts that the kernel it tests ran)."""
    from kernels import gluon_mla

    calls: list[T] = []
    real = gluon_mla.kernel

    def spy(kv_dtype: torch.dtype = torch.bfloat16, ws: bool = False, narrow: bool = False):
        calls.append(entry(kv_dtype, ws, narrow))
        return real(kv_dtype, ws=ws, narrow=narrow)

    monkeypatch.setattr(gluon_mla, "kernel", spy)
    return calls
