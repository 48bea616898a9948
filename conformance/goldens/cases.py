"""The golden case table of family C (persistent decode): literal `GoldenCase` records.

Every case is DeepSeek-R1 absorbed MLA (q and cache rows of 576, output rows of 512, one
kv head, sm_scale 1/√576), causal decode with the same q length for every request. The
table covers, on purpose:

- archs ``gfx942`` (e4m3fnuz), ``gfx950`` (e4m3fn) and ``triton`` (e4m3fn), with the CU/SM
  counts of real parts: MI308X 80, H100 132, MI355X 256, MI300X 304 (AITER sizes the
  fp32 partial buffer by the CU count: the large-head MTP cases use 80 to stay small);
- heads 16, 32, 48, 128: native and folded layouts, qo-split tiles (one tile per query
  token), and the gfx950 32-head fp8-kv fold of vLLM #46997;
- q/kv dtypes bf16/bf16, bf16/fp8 and fp8/fp8, with non-unit per-tensor scales;
- q lengths 1, 2, 4; page sizes 1, 16, 64; kv lengths on the tail and granularity
  boundaries (granularity 16 pages, i.e. 16 tokens at page 1, 256 at page 16, 4096 at
  page 64), including cases where the #2106 tail rule fires, where a split's first query
  rows see no kv (page > 1, AITER's short-tail hazard), and one batch whose first query
  row sees no kv at all (kv shorter than q: an all −inf reduce group);
- ``max_split_per_batch`` -1, 1, 16 and 32; batches up to 64.

Cases marked ``tiny`` (16 or 32 heads, contexts ≤ 64 tokens, batch ≤ 3) are the ones a
backend with ``tiny_cases_only`` (the Triton interpreter) runs.

Changing this table changes the goldens: regenerate with ``nox -s goldens``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from conformance.numerics.fp8 import fp8_dtype_for_arch

DTYPE_NAMES: tuple[str, ...] = ("bf16", "fp8")
"""How the table names dtypes; ``fp8`` is the arch's e4m3 flavour (`fp8_dtype_for_arch`)."""

TINY_MAX_HEADS = 32
TINY_MAX_CONTEXT = 64
TINY_MAX_BATCH = 3
REAL_CU_COUNTS: tuple[int, ...] = (80, 132, 256, 304)
_ID_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


@dataclass(frozen=True)
class GoldenCase:
    """One golden: the batch, the planning parameters and the inputs' seed and scales.

    ``seq_lens`` are kv lengths (context plus the new tokens), one per request; every
    request has ``q_len`` query tokens. ``alt_num_cus`` is the program count of the
    plan-invariance check (any count: generation requires its plan to differ from the
    golden plan, and to change the split layout where the batch is split).

    ``via_builder`` is False for a batch a metadata builder cannot express (kv shorter
    than q); its plan comes from the reference planner with ``plan_causal=False`` (the
    causal planner refuses kv < q; with ``page_size > 1`` the v1.2 plan does not depend
    on ``causal`` otherwise) and ``kv_granularity`` overrides the builders'
    ``max(page_size, 16)``. ``expect`` lists the plan features the case exists for
    (`conformance.goldens.generate.FEATURES`); generation refuses a golden that lost one.
    """

    id: str
    arch: str
    num_cus: int
    alt_num_cus: int
    heads: int
    q_len: int
    page_size: int
    q_dtype: str
    kv_dtype: str
    seq_lens: tuple[int, ...]
    seed: int
    q_scale: float = 1.0
    kv_scale: float = 1.0
    max_split_per_batch: int = -1
    tiny: bool = False
    via_builder: bool = True
    kv_granularity: int | None = None
    plan_causal: bool = True
    expect: tuple[str, ...] = ()
    purpose: str = ""

    @property
    def batch(self) -> int:
        """Number of requests."""
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        """Query tokens of the batch."""
        return self.batch * self.q_len

    @property
    def granularity(self) -> int:
        """kv granularity in pages, as the planner receives it (the profile's default,
        as the builders pass it, unless the case overrides it)."""
        from conformance.persistent.profiles import get_profile

        return self.kv_granularity or get_profile(self.arch).default_kv_granularity(self.page_size)

    @property
    def fp8_dtype(self) -> torch.dtype:
        """The e4m3 flavour of this case's arch."""
        return fp8_dtype_for_arch(self.arch)

    @property
    def q_torch_dtype(self) -> torch.dtype:
        """q's torch dtype."""
        return self.fp8_dtype if self.q_dtype == "fp8" else torch.bfloat16

    @property
    def kv_torch_dtype(self) -> torch.dtype:
        """The cache's torch dtype."""
        return self.fp8_dtype if self.kv_dtype == "fp8" else torch.bfloat16

    @property
    def has_fp8(self) -> bool:
        """Whether q or the cache is fp8 (the spy test's cases)."""
        return "fp8" in (self.q_dtype, self.kv_dtype)

    def to_json(self) -> dict[str, Any]:
        """The case as JSON-ready data (``seq_lens`` as a list)."""
        data = asdict(self)
        data["seq_lens"] = list(self.seq_lens)
        data["expect"] = list(self.expect)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GoldenCase:
        """Inverse of `to_json`; unknown or missing keys raise ValueError naming them."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"case: unknown keys {unknown}")
        values = dict(data)
        for key in ("seq_lens", "expect"):
            if key in values:
                values[key] = tuple(values[key])
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError(f"case: {exc}") from None

    def problems(self) -> list[str]:
        """What is wrong with this record (empty when it is a valid case)."""
        out = []
        if not _ID_PATTERN.fullmatch(self.id):
            out.append(f"id: expected lowercase letters, digits and '-', found {self.id!r}")
        if self.q_dtype not in DTYPE_NAMES or self.kv_dtype not in DTYPE_NAMES:
            out.append(f"dtypes: expected bf16/fp8, found q {self.q_dtype}, kv {self.kv_dtype}")
        if self.q_dtype == "fp8" and self.kv_dtype != "fp8":
            out.append("dtypes: fp8 q with a bf16 cache is not a persistent MLA combination")
        if self.q_dtype == "bf16" and self.q_scale != 1.0:
            out.append(f"q_scale: a bf16 q has scale 1.0, found {self.q_scale}")
        if self.kv_dtype == "bf16" and self.kv_scale != 1.0:
            out.append(f"kv_scale: a bf16 cache has scale 1.0, found {self.kv_scale}")
        for name in ("q_scale", "kv_scale"):
            value = getattr(self, name)
            if getattr(self, name.replace("scale", "dtype")) == "fp8" and value == 1.0:
                out.append(f"{name}: fp8 goldens use a non-unit scale, found 1.0")
        if not self.seq_lens:
            out.append("seq_lens: expected at least one request")
        if self.via_builder and any(s < self.q_len for s in self.seq_lens):
            out.append(f"seq_lens: {self.seq_lens} has a kv length below q_len {self.q_len}")
        if self.num_cus not in REAL_CU_COUNTS:
            out.append(f"num_cus: expected a count of a real part {REAL_CU_COUNTS}")
        if self.alt_num_cus < 1 or self.alt_num_cus == self.num_cus:
            out.append(f"alt_num_cus: expected >= 1 and != num_cus, found {self.alt_num_cus}")
        if self.tiny and (
            self.heads > TINY_MAX_HEADS
            or max(self.seq_lens) > TINY_MAX_CONTEXT
            or self.batch > TINY_MAX_BATCH
        ):
            out.append(
                f"tiny: expected heads <= {TINY_MAX_HEADS}, contexts <= {TINY_MAX_CONTEXT}, "
                f"batch <= {TINY_MAX_BATCH}"
            )
        return out


def _case(**kwargs: Any) -> GoldenCase:
    kwargs["seq_lens"] = tuple(kwargs["seq_lens"])
    kwargs["expect"] = tuple(kwargs.get("expect", ()))
    return GoldenCase(**kwargs)


# Batch 64 at page size 1: kv lengths on the 16-token block boundaries, then around the
# 64-token fragment this batch's payload gives (4 blocks per program at 304 CUs).
_B64_KV_LENS = (
    *(1, 2, 15, 16, 17, 31, 32, 33) * 6,
    *(47, 48, 49, 63, 64, 65, 66, 79, 80, 81, 3, 5, 8, 9, 12, 20),
)

CASES: tuple[GoldenCase, ...] = (
    # ---- tiny: what the Triton interpreter runs ------------------------------------------
    _case(
        id="tiny-gfx942-h16-bf16q-fp8kv-q1-p1-cu80",
        arch="gfx942",
        num_cus=80,
        alt_num_cus=4,
        heads=16,
        q_len=1,
        page_size=1,
        q_dtype="bf16",
        kv_dtype="fp8",
        kv_scale=0.0273,
        seq_lens=(17, 64, 33),
        seed=101,
        tiny=True,
        expect=("split",),
        purpose="gfx942 fnuz cache, kv one past a block boundary, splits across many CUs",
    ),
    _case(
        id="tiny-gfx950-h32-fp8-q2-p16-cu256",
        arch="gfx950",
        num_cus=256,
        alt_num_cus=4,
        heads=32,
        q_len=2,
        page_size=16,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0119,
        kv_scale=0.0231,
        seq_lens=(64, 18),
        seed=102,
        tiny=True,
        expect=("bf16-plan-differs",),
        purpose="gfx950 fp8 32 heads native; bf16 planning sizes it differently (#46997)",
    ),
    _case(
        id="tiny-triton-h16-fp8-q4-p1-cu132-tail",
        arch="triton",
        num_cus=132,
        alt_num_cus=4,
        heads=16,
        q_len=4,
        page_size=1,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0157,
        kv_scale=0.0188,
        seq_lens=(18, 64, 4),
        seed=103,
        tiny=True,
        expect=("split", "tail-rule"),
        purpose="MTP 4: the #2106 tail rule absorbs a 2-token tail; kv length equal to q",
    ),
    _case(
        id="tiny-gfx942-h32-bf16-q2-p64-cu304",
        arch="gfx942",
        num_cus=304,
        alt_num_cus=4,
        heads=32,
        q_len=2,
        page_size=64,
        q_dtype="bf16",
        kv_dtype="bf16",
        seq_lens=(64, 3),
        seed=104,
        tiny=True,
        expect=("fold",),
        purpose="bf16 cache, gfx942 folds 32 heads into 2 x 16, one full page of 64",
    ),
    # ---- DeepSeek-R1 on MI300X / MI308X (gfx942, e4m3fnuz) ------------------------------
    _case(
        id="gfx942-h16-fp8-q1-p1-cu304-b64",
        arch="gfx942",
        num_cus=304,
        alt_num_cus=80,
        heads=16,
        q_len=1,
        page_size=1,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0221,
        kv_scale=0.0246,
        seq_lens=_B64_KV_LENS,
        seed=201,
        expect=("split",),
        purpose="TP8 decode at batch 64, kv on every 16-token block boundary",
    ),
    _case(
        id="gfx942-h16-bf16-q4-p1-cu80-tail",
        arch="gfx942",
        num_cus=80,
        alt_num_cus=8,
        heads=16,
        q_len=4,
        page_size=1,
        q_dtype="bf16",
        kv_dtype="bf16",
        seq_lens=(35, 19, 4),
        seed=202,
        expect=("split", "tail-rule"),
        purpose="MTP 4 bf16: the tail rule absorbs short tails",
    ),
    _case(
        id="gfx942-h16-fp8-q4-p16-cu80-masked-split",
        arch="gfx942",
        num_cus=80,
        alt_num_cus=4,
        heads=16,
        q_len=4,
        page_size=16,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0302,
        kv_scale=0.0214,
        seq_lens=(257, 40),
        seed=203,
        expect=("split", "masked-split-rows"),
        purpose="page 16, MTP 4: last split holds one page of 1 token, rows 0-2 see none",
    ),
    _case(
        id="gfx942-h128-fp8-q2-p1-cu304",
        arch="gfx942",
        num_cus=304,
        alt_num_cus=8,
        heads=128,
        q_len=2,
        page_size=1,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0197,
        kv_scale=0.0265,
        max_split_per_batch=32,
        seq_lens=(300,),
        seed=204,
        expect=("split", "qo-split", "bf16-plan-differs"),
        purpose="native fp8 128 heads, one qo tile per query token (causal trim)",
    ),
    _case(
        id="gfx942-h48-bf16q-fp8kv-q2-p1-cu80",
        arch="gfx942",
        num_cus=80,
        alt_num_cus=304,
        heads=48,
        q_len=2,
        page_size=1,
        q_dtype="bf16",
        kv_dtype="fp8",
        kv_scale=0.0239,
        seq_lens=(255, 2),
        seed=205,
        expect=("split", "fold"),
        purpose="48 heads fold into 3 x 16 with MTP 2 (AITER #2363 layout)",
    ),
    _case(
        id="gfx942-h32-fp8-q4-p16-cu80-msb16",
        arch="gfx942",
        num_cus=80,
        alt_num_cus=8,
        heads=32,
        q_len=4,
        page_size=16,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0177,
        kv_scale=0.0288,
        max_split_per_batch=16,
        seq_lens=(273, 4),
        seed=206,
        expect=("split", "fold", "capped"),
        purpose="fp8 32 heads folded on gfx942, page 16, split cap 16",
    ),
    _case(
        id="gfx942-h128-bf16q-fp8kv-q1-p64-cu304",
        arch="gfx942",
        num_cus=304,
        alt_num_cus=80,
        heads=128,
        q_len=1,
        page_size=64,
        q_dtype="bf16",
        kv_dtype="fp8",
        kv_scale=0.0223,
        seq_lens=(600,),
        seed=207,
        expect=("fold",),
        purpose="bf16 q folds 128 heads into 8 x 16; page 64 split at the 4096-token block",
    ),
    _case(
        id="gfx942-h16-bf16-q1-p1-cu304-msb1",
        arch="gfx942",
        num_cus=304,
        alt_num_cus=4,
        heads=16,
        q_len=1,
        page_size=1,
        q_dtype="bf16",
        kv_dtype="bf16",
        max_split_per_batch=1,
        seq_lens=(129, 17, 1, 64, 48, 33),
        seed=208,
        expect=("split", "capped"),
        purpose="split cap 1: as many programs as requests receive work",
    ),
    # ---- MI355X (gfx950, e4m3fn) ----------------------------------------------------------
    _case(
        id="gfx950-h32-bf16q-fp8kv-q1-p1-cu256-vllm46997",
        arch="gfx950",
        num_cus=256,
        alt_num_cus=80,
        heads=32,
        q_len=1,
        page_size=1,
        q_dtype="bf16",
        kv_dtype="fp8",
        kv_scale=0.0127,
        seq_lens=(200, 33, 97, 17, 129, 2),
        seed=301,
        expect=("split", "fold", "bf16-plan-differs"),
        purpose="fp8 cache folds 32 heads into 2 x 16 on gfx950; planned as bf16 it stays "
        "native (vLLM #46997)",
    ),
    _case(
        id="gfx950-h32-fp8-q2-p1-cu256-vllm46997",
        arch="gfx950",
        num_cus=256,
        alt_num_cus=80,
        heads=32,
        q_len=2,
        page_size=1,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0093,
        kv_scale=0.0141,
        max_split_per_batch=32,
        seq_lens=(200, 31, 65, 3),
        seed=302,
        expect=("split", "bf16-plan-differs", "capped"),
        purpose="fp8 32 heads native on gfx950; bf16 planning sizes 1 tile per batch, not 4",
    ),
    _case(
        id="gfx950-h128-fp8-q4-p1-cu80",
        arch="gfx950",
        num_cus=80,
        alt_num_cus=8,
        heads=128,
        q_len=4,
        page_size=1,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0105,
        kv_scale=0.0166,
        seq_lens=(300,),
        seed=303,
        expect=("split", "qo-split"),
        purpose="native fp8 128 heads, MTP 4: four causal-trimmed tiles per request (80 "
        "CUs: AITER sizes the fp32 partials 1.1 GB at 256, 336 MB here)",
    ),
    _case(
        id="gfx950-h48-bf16-q2-p16-cu256",
        arch="gfx950",
        num_cus=256,
        alt_num_cus=4,
        heads=48,
        q_len=2,
        page_size=16,
        q_dtype="bf16",
        kv_dtype="bf16",
        seq_lens=(257,),
        seed=304,
        expect=("split", "qo-split", "masked-split-rows"),
        purpose="gfx950 bf16 48 heads: 64 packed rows per program, one tile per token",
    ),
    _case(
        id="gfx950-h48-fp8-q1-p64-cu256",
        arch="gfx950",
        num_cus=256,
        alt_num_cus=80,
        heads=48,
        q_len=1,
        page_size=64,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0133,
        kv_scale=0.0152,
        seq_lens=(129, 64, 65),
        seed=305,
        expect=("fold", "bf16-plan-differs"),
        purpose="fp8 48 heads fold into 3 x 16 on gfx950, page 64 boundaries",
    ),
    _case(
        id="gfx950-h16-bf16q-fp8kv-q4-p64-cu256",
        arch="gfx950",
        num_cus=256,
        alt_num_cus=132,
        heads=16,
        q_len=4,
        page_size=64,
        q_dtype="bf16",
        kv_dtype="fp8",
        kv_scale=0.0172,
        seq_lens=(130, 66),
        seed=306,
        purpose="page 64, MTP 4, last pages holding 2 tokens",
    ),
    # ---- the suite's CUDA Triton kernel (H100: 132 SMs, e4m3fn) ---------------------------
    _case(
        id="triton-h128-fp8-q1-p1-cu132",
        arch="triton",
        num_cus=132,
        alt_num_cus=80,
        heads=128,
        q_len=1,
        page_size=1,
        q_dtype="fp8",
        kv_dtype="fp8",
        q_scale=0.0161,
        kv_scale=0.0199,
        seq_lens=(400,),
        seed=401,
        expect=("split", "fold"),
        purpose="128 heads fold into 2 x 64 per program",
    ),
    _case(
        id="triton-h48-bf16-q2-p16-cu132",
        arch="triton",
        num_cus=132,
        alt_num_cus=4,
        heads=48,
        q_len=2,
        page_size=16,
        q_dtype="bf16",
        kv_dtype="bf16",
        seq_lens=(257,),
        seed=402,
        expect=("split", "qo-split", "masked-split-rows"),
        purpose="48 heads x 2 tokens exceed 64 packed rows: one tile per token",
    ),
    _case(
        id="triton-h32-bf16q-fp8kv-q4-p1-cu132-tail",
        arch="triton",
        num_cus=132,
        alt_num_cus=4,
        heads=32,
        q_len=4,
        page_size=1,
        q_dtype="bf16",
        kv_dtype="fp8",
        kv_scale=0.0208,
        max_split_per_batch=32,
        seq_lens=(99, 50),
        seed=403,
        expect=("split", "qo-split", "tail-rule", "capped"),
        purpose="MTP 4 over 32 heads: two tiles of 2 tokens, tail rule",
    ),
    # ---- a batch no builder can express: kv shorter than q --------------------------------
    _case(
        id="gfx942-h16-bf16q-fp8kv-q4-p2-cu80-kv-lt-q",
        arch="gfx942",
        num_cus=80,
        alt_num_cus=8,
        heads=16,
        q_len=4,
        page_size=2,
        q_dtype="bf16",
        kv_dtype="fp8",
        kv_scale=0.0251,
        seq_lens=(3, 21),
        seed=501,
        via_builder=False,
        kv_granularity=1,
        plan_causal=False,
        expect=("split", "masked-split-rows", "all-neg-inf-group"),
        purpose="request 0 has 3 kv tokens for 4 queries: its row 0 sees none in every "
        "split (an all -inf reduce group; CUDA-graph padding, AITER #1677)",
    ),
)


def case_table() -> dict[str, GoldenCase]:
    """The cases by id; raises ValueError naming a duplicate id or an invalid case."""
    table: dict[str, GoldenCase] = {}
    for case in CASES:
        if case.id in table:
            raise ValueError(f"case table: duplicate id {case.id!r}")
        problems = case.problems()
        if problems:
            raise ValueError(f"case {case.id}: " + "; ".join(problems))
        table[case.id] = case
    return table


def get_case(case_id: str) -> GoldenCase:
    """The case called `case_id`; the error lists the known ids."""
    table = case_table()
    try:
        return table[case_id]
    except KeyError:
        raise KeyError(f"unknown golden case {case_id!r}; known: {', '.join(table)}") from None
