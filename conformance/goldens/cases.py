"""The golden case table (`cases.json`, one case per line) and its `GoldenCase` record.

Every case is DeepSeek-R1 absorbed MLA (q and cache rows of 576, output rows of 512, one
kv head), decode with the same q length for every request (causal unless the case says
otherwise), at the softmax scale 1/√576 unless the case names another
(``softmax_scale``, one of `conformance.numerics.softmax_scale.SOFTMAX_SCALES`). The table
covers, on purpose:

- archs ``gfx942`` (e4m3fnuz), ``gfx950`` (e4m3fn) and ``triton`` (e4m3fn), with the CU/SM
  counts of real parts: MI308X 80, H100 132, MI355X 256, MI300X 304 (AITER sizes the
  fp32 partial buffer by the CU count: the large-head MTP cases use 80 to stay small);
- heads 16, 32, 48, 64, 128: native and folded layouts, qo-split tiles (one tile per query
  token, and tiles of unequal rows at q length 3), and the gfx950 32-head fp8-kv fold of
  vLLM #46997;
- q/kv dtypes bf16/bf16, bf16/fp8 (both e4m3 flavours: FlashInfer's fp8 is bf16 q over an
  e4m3fn cache) and fp8/fp8, with non-unit per-tensor scales;
- q lengths 1, 2, 3, 4; page sizes 1, 2, 16, 64; kv length 1; full and partial last pages;
  a non-causal multi-token batch; padded rows of q length 0 in the CAM (``pad_rows``);
  kv lengths on the tail and granularity boundaries (granularity 16 pages, i.e. 16 tokens
  at page 1, 256 at page 16, 4096 at page 64), including cases where the #2106 tail rule
  fires, where a split's first query rows see no kv (page > 1, AITER's short-tail hazard),
  and one batch whose first query row sees no kv at all (kv shorter than q: an all −inf
  reduce group);
- ``max_split_per_batch`` -1, 1, 16 and 32; batches up to 64;
- two softmax scales: 1/√576, and DeepSeek-V3's 1/√192 × YaRN's mscale² (3.25 times
  larger) on tiny bf16, bf16-q fp8-cache and fp8 cases, so that a backend that ignores the
  caller's ``sm_scale`` fails.

Cases marked ``tiny`` (16 or 32 heads, contexts ≤ 64 tokens, batch ≤ 3) are the ones a
backend with ``tiny_cases_only`` (the Triton interpreter) runs.

Changing this table changes the goldens: regenerate with ``nox -s goldens``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from conformance.numerics.fp8 import fp8_dtype_for_arch
from conformance.numerics.softmax_scale import (
    DEFAULT_SOFTMAX_SCALE,
    SOFTMAX_SCALES,
    score_rms,
)
from conformance.numerics.softmax_scale import softmax_scale as named_scale

DTYPE_NAMES: tuple[str, ...] = ("bf16", "fp8")
"""How the table names dtypes; ``fp8`` is the arch's e4m3 flavour (`fp8_dtype_for_arch`)."""

TINY_MAX_HEADS = 32
TINY_MAX_CONTEXT = 64
TINY_MAX_BATCH = 3
REAL_CU_COUNTS: tuple[int, ...] = (80, 132, 256, 304)
_ID_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
TABLE_PATH = Path(__file__).with_name("cases.json")


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
    ``max(page_size, 16)``. ``softmax_scale`` names the scale the decode receives
    (`conformance.numerics.softmax_scale`). ``expect`` lists the plan features the case
    exists for (`conformance.goldens.generate.FEATURES`); generation refuses a golden that
    lost one.
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
    causal: bool = True
    pad_rows: int = 0
    softmax_scale: str = DEFAULT_SOFTMAX_SCALE
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
    def planner_causal(self) -> bool:
        """The ``causal`` argument of the golden's planner call."""
        return self.causal and self.plan_causal

    @property
    def granularity(self) -> int:
        """kv granularity in pages, as the planner receives it (the profile's default,
        as the builders pass it, unless the case overrides it)."""
        from conformance.persistent.profiles import get_profile

        return self.kv_granularity or get_profile(self.arch).default_kv_granularity(self.page_size)

    @property
    def sm_scale(self) -> float:
        """The softmax scale the decode of this case receives."""
        return named_scale(self.softmax_scale)

    @property
    def score_rms(self) -> float:
        """RMS of the scores on this case's N(0, 1) q and latent cache (the error model's
        ``score_rms``): 1 at 1/√576."""
        return score_rms(self.sm_scale)

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
        """The case as JSON-ready data (``seq_lens`` as a list). ``softmax_scale`` is left
        out at its default, so that the goldens made before cases named a scale keep their
        bytes (their metadata holds the case)."""
        data = asdict(self)
        data["seq_lens"] = list(self.seq_lens)
        data["expect"] = list(self.expect)
        if self.softmax_scale == DEFAULT_SOFTMAX_SCALE:
            del data["softmax_scale"]
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
        if self.softmax_scale not in SOFTMAX_SCALES:
            out.append(
                f"softmax_scale: expected one of {sorted(SOFTMAX_SCALES)}, "
                f"found {self.softmax_scale!r}"
            )
        if not self.seq_lens:
            out.append("seq_lens: expected at least one request")
        if self.via_builder and any(s < self.q_len for s in self.seq_lens):
            out.append(f"seq_lens: {self.seq_lens} has a kv length below q_len {self.q_len}")
        if self.pad_rows < 0 or (self.pad_rows and not self.via_builder):
            out.append(f"pad_rows: expected >= 0 on a builder case, found {self.pad_rows}")
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


def load_table(path: Path = TABLE_PATH) -> tuple[GoldenCase, ...]:
    """The cases of a JSON table (a list of case objects); errors name the file and case."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a list of case objects")
    cases = []
    for number, row in enumerate(rows, 1):
        try:
            cases.append(GoldenCase.from_json(row))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: case {number}: {exc}") from None
    return tuple(cases)


CASES: tuple[GoldenCase, ...] = load_table()


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
