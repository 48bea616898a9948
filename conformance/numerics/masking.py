"""The exact masking check: a crafted paged cache on which a leaked token cannot hide.

Every kv slot a query row must not see — the tokens past the row's causal window, the slots
past each sequence's end, the unused and the null blocks — holds a **sentinel**: a key whose
rope part is aligned with that row's q, so that its score ``S`` is far above every visible
token's, and the value vector ``SENTINEL_VALUE`` in every column. Every visible token's
score is exactly 0 (its key is orthogonal to the row's q), so the exact result of row ``r``
that sees ``V_r`` tokens is known without any numerics:

    lse_r = ln(V_r)             out_r = kv_scale · mean of the values of its V_r tokens

How it is crafted (q and cache rows are 576 wide: 512 latent columns, then 64 rope columns):
query token ``i`` of a request has ``Q_ROPE`` in rope column ``i`` and zeros elsewhere; the
kv token at ``L − n + 1 + j`` (one of the last ``n − 1`` tokens of a request with ``n`` query
tokens and ``L`` kv tokens) is hidden from query tokens ``i ≤ j`` and so carries ``K_ROPE``
in rope columns ``0..j`` and the sentinel value; a slot outside every sequence carries
``K_ROPE`` in every query column. Every other token is honest: rope part 0, latent values
multiples of 1/8 in [−1, 1]. All these values are exact in bf16 and both e4m3 flavours.

The margins are derived, not tuned:

- **lse**: a leaked sentinel gives ``lse ≥ S = Q_ROPE · K_ROPE · sm_scale · q_scale ·
  kv_scale`` (≈ 42.7 at 1/√576, 138.5 at DeepSeek-V3's scale, against ``ln(V) ≤ ln 64``);
  a token wrongly hidden lowers it by ``ln(V / (V − 1))``. The bound is half the smallest
  such change, ``½ ln(V_max / (V_max − 1))``; the exact figure's rounding (fp32: ~1e-6) is
  far below it.
- **output**: one leaked sentinel takes weight ``w ≥ 1 − V·e^−S`` and moves the row's output
  in every column to at least ``kv_scale · (w · SENTINEL_VALUE − (1 − w))``; the bound is half
  the smallest distance from there to the exact output (``0.875 · kv_scale`` for the batch
  below, set by the last query token of the request whose kv length equals its query
  length), while a correct decode's output is off by a few bf16 roundings of values
  ≤ ``8 · kv_scale`` (measured on the ``cpu`` and ``interpret`` backends: at most
  ``0.021 · kv_scale``, and 2.8e-7 on the LSE).

The exact result does not depend on ``sm_scale`` (every visible score is 0), so the batch is
made at every scale the suite passes (`conformance.numerics.softmax_scale.SOFTMAX_SCALES`):
a mask whose hiding depends on the scale (a finite bias, say) shows at one of them. A
wrong ``sm_scale`` itself is the goldens' to catch.

**What a failure shows** (`MaskingProblem.cause`). A row whose LSE is off saw a token it
must not see, or missed one it must see: the mask (``window``). A row whose LSE is exact
weighs the right tokens. When every LSE is exact and every row's output is the exact one
divided (or multiplied) by ``kv_scale``, the decode did not apply the kv scale to its output
exactly once (``kv-scale``); any other output error is charged to the mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from conformance.applicability import lse_compared
from conformance.metadata.batch import BatchSpec, make_cam
from conformance.metadata.record import CommonAttentionMetadata
from conformance.numerics.fp8 import is_fp8
from conformance.numerics.softmax_scale import DEFAULT_SM_SCALE

KV_LORA_RANK = 512
HEAD_SIZE = 576
Q_ROPE = 16.0
K_ROPE = 64.0
SENTINEL_VALUE = 8.0
SM_SCALE = DEFAULT_SM_SCALE
FP8_Q_SCALE = 0.5
FP8_KV_SCALE = 2.0
# Requests (kv lengths) of 4 query tokens each, pages of 16 tokens: a last page with 5 of
# 16 slots used, a request whose first query token sees one token (kv = q), three pages.
SEQ_LENS = (21, 4, 40)
QUERY_LEN = 4
PAGE_SIZE = 16
HEADS = 16
SPARE_BLOCKS = 1
SEED = 25


@dataclass(frozen=True)
class MaskingBatch:
    """The crafted batch, its exact result and the margins of the check."""

    cam: CommonAttentionMetadata
    q: torch.Tensor
    kv_cache: torch.Tensor
    sm_scale: float
    q_scale: float
    kv_scale: float
    visible: torch.Tensor
    """int64 [tokens]: kv tokens each query row sees."""
    rows: list[tuple[int, int]]
    """(request, query token) of each row."""
    expected_out: torch.Tensor
    """fp64 [tokens, 512] (the same for every head)."""
    expected_lse: torch.Tensor
    """fp64 [tokens]."""

    @property
    def page_size(self) -> int:
        """Tokens per page of the cache."""
        return int(self.kv_cache.shape[1])

    @property
    def num_blocks(self) -> int:
        """Blocks in the cache, the null block included."""
        return int(self.kv_cache.shape[0])

    # The margins of the check, derived as the module docstring says.

    @property
    def sentinel_score(self) -> float:
        """The score ``S`` of a sentinel in the row it is aligned with."""
        return Q_ROPE * K_ROPE * self.sm_scale * self.q_scale * self.kv_scale

    @property
    def lse_bound(self) -> float:
        """Half the smallest change of a row's LSE that one token wrongly hidden makes."""
        most = int(self.visible.max())
        return 0.5 * math.log(most / (most - 1))

    @property
    def out_bound(self) -> float:
        """Half the smallest distance from the exact output to one with a leaked sentinel."""
        most = int(self.visible.max())
        weight = 1.0 - most * math.exp(-self.sentinel_score)  # a leaked sentinel's, at least
        leaked = self.kv_scale * (weight * SENTINEL_VALUE - (1.0 - weight))
        return 0.5 * float((leaked - self.expected_out).min())


def _visible(seq_len: int, n: int, causal: bool) -> list[int]:
    return [seq_len - n + 1 + i if causal else seq_len for i in range(n)]


def page_size_for(declared: tuple[int, ...] | None) -> int:
    """The batch's page size for a backend declaring `declared` page sizes (None: any):
    `PAGE_SIZE`, unless the backend's kernel reads other pages only (then its first)."""
    return PAGE_SIZE if declared is None or PAGE_SIZE in declared else int(declared[0])


def make_masking_batch(
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
    device: torch.device | str = "cpu",
    *,
    page_size: int = PAGE_SIZE,
    sm_scale: float = SM_SCALE,
) -> MaskingBatch:
    """The crafted causal batch in these dtypes (fp8: per-tensor scales 0.5 and 2), in
    pages of `page_size` tokens, decoded at `sm_scale`."""
    n = QUERY_LEN
    spec = BatchSpec(SEQ_LENS, (n,) * len(SEQ_LENS), "masking")
    pages = sum(-(-s // page_size) for s in SEQ_LENS)
    num_blocks = pages + 1 + SPARE_BLOCKS
    cam = make_cam(
        spec,
        block_size=page_size,
        device=device,
        num_blocks=num_blocks,
        seed=SEED,
        decode_threshold=n,
    )
    q_scale = FP8_Q_SCALE if is_fp8(q_dtype) else 1.0
    kv_scale = FP8_KV_SCALE if is_fp8(kv_dtype) else 1.0
    gen = torch.Generator().manual_seed(SEED)
    # every slot starts as a sentinel hidden from every query token
    cache = torch.zeros((num_blocks * page_size, HEAD_SIZE), dtype=torch.float64)
    cache[:, :KV_LORA_RANK] = SENTINEL_VALUE
    cache[:, KV_LORA_RANK : KV_LORA_RANK + n] = K_ROPE
    q = torch.zeros((len(SEQ_LENS) * n, HEADS, HEAD_SIZE), dtype=torch.float64)
    table = cam.block_table_tensor.cpu()
    rows, visible = [], []
    for b, length in enumerate(SEQ_LENS):
        slots = table[b, torch.arange(length) // page_size] * page_size
        slots = slots.to(torch.int64) + torch.arange(length) % page_size
        honest = torch.randint(-8, 9, (length, KV_LORA_RANK), generator=gen) / 8.0
        cache[slots, :KV_LORA_RANK] = honest.double()
        cache[slots, KV_LORA_RANK:] = 0.0
        for j in range(n - 1):  # the window's tail: hidden from query tokens 0..j
            p = length - n + 1 + j
            if p >= 0:
                cache[slots[p], :KV_LORA_RANK] = SENTINEL_VALUE
                cache[slots[p], KV_LORA_RANK : KV_LORA_RANK + j + 1] = K_ROPE
        for i in range(n):
            q[b * n + i, :, KV_LORA_RANK + i] = Q_ROPE
            rows.append((b, i))
        visible += _visible(length, n, cam.causal)
    kv = cache.view(num_blocks, page_size, HEAD_SIZE)
    expected_out, expected_lse = _exact_result(kv, cam, visible, kv_scale, page_size)
    return MaskingBatch(
        cam=cam,
        q=q.float().to(q_dtype).to(device),
        kv_cache=kv.float().to(kv_dtype).to(device),
        sm_scale=sm_scale,
        q_scale=q_scale,
        kv_scale=kv_scale,
        visible=torch.tensor(visible),
        rows=rows,
        expected_out=expected_out,
        expected_lse=expected_lse,
    )


def _exact_result(
    kv: torch.Tensor,
    cam: CommonAttentionMetadata,
    visible: list[int],
    kv_scale: float,
    page_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every visible score is 0: the output is the mean of the visible values."""
    table = cam.block_table_tensor.cpu().to(torch.int64)
    flat = kv.reshape(-1, HEAD_SIZE)
    outs = []
    row = 0
    for b, length in enumerate(SEQ_LENS):
        slots = table[b, torch.arange(length) // page_size] * page_size
        slots = slots + torch.arange(length) % page_size
        for _ in range(QUERY_LEN):
            seen = slots[: visible[row]]
            outs.append(flat[seen, :KV_LORA_RANK].mean(dim=0) * kv_scale)
            row += 1
    lse = torch.tensor(visible, dtype=torch.float64).log()
    return torch.stack(outs), lse


def worst_errors(
    batch: MaskingBatch, out: torch.Tensor, lse: torch.Tensor | None
) -> dict[str, float]:
    """The largest LSE and output errors against the exact result (over every row); no LSE
    error where the decode returned none (`masking_problems` says whether that may be)."""
    out = out.detach().to("cpu", torch.float64)
    errors = {"out_err": float((out - batch.expected_out[:, None, :]).abs().max())}
    if lse is not None:
        lse = lse.detach().to("cpu", torch.float64)
        errors["lse_err"] = float((lse - batch.expected_lse[:, None]).abs().max())
    return errors


WINDOW = "window"
"""Cause of a row that saw a token it must not see, or missed one it must see."""
KV_SCALE = "kv-scale"
"""Cause of a row that weighs the right tokens but scales its output wrongly by kv_scale."""
_KV_SCALE_SLIPS: tuple[tuple[str, int], ...] = (("not applied to", -1), ("applied twice to", 1))
"""How an output can be off by the kv scale: the exact output times ``kv_scale ** power``."""


@dataclass(frozen=True)
class MaskingProblem:
    """One query row's problem: what it shows (`WINDOW` or `KV_SCALE`) and the line."""

    cause: str
    text: str


def _kv_scale_slip(batch: MaskingBatch, out: torch.Tensor, lse: torch.Tensor | None) -> str | None:
    """How the kv scale was misapplied, if that explains the whole result: every LSE exact
    (where compared) and every row's output within the bound of the exact one times
    ``kv_scale ** ±1``."""
    if batch.kv_scale == 1.0:
        return None
    if lse is not None and float((lse - batch.expected_lse[:, None]).abs().max()) > batch.lse_bound:
        return None
    for what, power in _KV_SCALE_SLIPS:
        slipped = batch.expected_out[:, None, :] * batch.kv_scale**power
        if float((out - slipped).abs().max()) <= batch.out_bound:
            return what
    return None


JUDGED = ("out", "lse")
"""What a masking or golden check judges by default: the output and the LSE."""


def masking_problems(
    batch: MaskingBatch,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    *,
    parts: tuple[str, ...] = JUDGED,
) -> list[MaskingProblem]:
    """One problem per query row whose LSE or output is off, with its likely cause. A None
    `lse` checks the output alone where the suite derives the LSE is not comparable
    (`conformance.applicability.lse_compared`), and fails anywhere else. `parts` judges one
    of the two alone (``("out",)``: the LSE is then used only to tell a kv-scale slip)."""
    out = out.detach().to("cpu", torch.float64)
    if "lse" in parts or lse is not None:
        lse = lse.detach().to("cpu", torch.float64) if lse_compared(lse, "masking") else None
    slip = _kv_scale_slip(batch, out, lse)
    problems = []
    for r, (b, i) in enumerate(batch.rows):
        where = (
            f"request {b} query token {i} (kv {SEQ_LENS[b]}, sees the first "
            f"{int(batch.visible[r])} tokens)"
        )
        if lse is not None and "lse" in parts:
            problems += _lse_problems(batch, where, r, lse[r])
        out_err = float((out[r] - batch.expected_out[r]).abs().max())
        if out_err <= batch.out_bound or "out" not in parts:
            continue
        if slip is not None:
            problems.append(
                MaskingProblem(
                    KV_SCALE,
                    f"{where}: output off the mean of its visible values times kv_scale by "
                    f"{out_err:.3f} (bound {batch.out_bound:.3f}) while its lse is exact: the "
                    f"kv scale ({batch.kv_scale:g}) was {slip} the output",
                )
            )
            continue
        problems.append(
            MaskingProblem(
                WINDOW,
                f"{where}: output off the mean of its visible values by {out_err:.3f} "
                f"(bound {batch.out_bound:.3f}, half of what one leaked sentinel moves it; "
                f"sentinel value {SENTINEL_VALUE * batch.kv_scale:g})",
            )
        )
    return problems


def _lse_problems(
    batch: MaskingBatch, where: str, r: int, got_lse: torch.Tensor
) -> list[MaskingProblem]:
    """The LSE line of query row `r` (empty when it is within the bound)."""
    lse_err = float((got_lse - batch.expected_lse[r]).abs().max())
    if lse_err <= batch.lse_bound:
        return []
    worst = float(got_lse[(got_lse - batch.expected_lse[r]).abs().argmax()])
    seen = int(batch.visible[r])
    fewer = math.log(seen - 1) if seen > 1 else -math.inf
    return [
        MaskingProblem(
            WINDOW,
            f"{where}: lse {worst:.4f}, exact ln({seen}) = "
            f"{float(batch.expected_lse[r]):.4f} (bound ±{batch.lse_bound:.4f}): a leaked "
            f"sentinel makes it {batch.sentinel_score:.2f} or more, one token hidden too "
            f"many ln({seen - 1}) = {fewer:.4f}",
        )
    ]


def masking_summary(batch: MaskingBatch, problems: list[MaskingProblem]) -> str:
    """What the problems show, in one sentence: the mask, the kv scale, or both."""
    causes = {p.cause for p in problems}
    parts = []
    if WINDOW in causes:
        parts.append(
            "the decode let a token outside a row's causal window, or past its sequence's "
            "end, into the softmax (or hid one it must see)"
        )
    if KV_SCALE in causes:
        parts.append(
            f"the decode weighs the right tokens but does not multiply its output by "
            f"kv_scale ({batch.kv_scale:g}) exactly once (the output is the softmax-weighted "
            f"sum of V times kv_scale)"
        )
    return "; and ".join(parts)
