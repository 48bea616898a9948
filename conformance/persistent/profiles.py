"""Architecture profiles of the persistent-decode planner.

A profile is a small record of predicate functions that decide, for one kernel family,
how heads are laid out per work (native or folded), how many packed q rows one
persistent program holds, whether qo tiles are split, how many qo tiles the buffers are
sized for, and how a folded causal tile is trimmed. Everything else (overhead, payload,
tail rule, kv_offset, reduce maps) is shared by every profile (planner.py).

- ``gfx942`` and ``gfx950`` follow AITER v1.2 (``csrc/kernels/mla/metadata/v1_2_device.cuh``
  and ``get_mla_metadata_info_v1`` in ``aiter/ops/attention.py``) with occupancy 1, i.e.
  ``AITER_ENABLE_EXPERIMENTAL`` unset (no HK/opus kernels).
- ``triton`` is the suite's own CUDA Triton kernel: 64 heads per work at most (folding
  by 64), 64 packed rows per program.

A later backend adds its profile with `register_profile`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import torch

from conformance.errors import PlanError

DtypeClass = Literal["bf16", "fp16", "fp8"]
"""How a planner sees a q or kv dtype: AITER only distinguishes fp8 from the rest."""

_NON_FP8: Mapping[torch.dtype, DtypeClass] = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def dtype_class(dtype: object, *, argument: str) -> DtypeClass:
    """Classify a torch dtype as ``bf16``, ``fp16`` or ``fp8`` (any float8 storage dtype).

    ``None`` is rejected: AITER reads a missing dtype as bf16, which plans an fp8 run for
    the wrong kernel (vLLM #46997); this API demands explicit dtypes.
    """
    if dtype is None:
        raise PlanError(
            f"{argument}: expected an explicit torch dtype (bfloat16, float16 or a float8 "
            f"dtype), found None; AITER silently reads None as bfloat16 (vLLM #46997)"
        )
    if not isinstance(dtype, torch.dtype):
        raise PlanError(f"{argument}: expected a torch.dtype, found {dtype!r}")
    if dtype in _NON_FP8:
        return _NON_FP8[dtype]
    name = str(dtype).removeprefix("torch.")
    if name.startswith("float8_") and not name.startswith("float8_e8m0"):
        return "fp8"
    raise PlanError(
        f"{argument}: expected bfloat16, float16 or a float8 dtype, found {dtype} "
        f"(not a q/kv dtype of MLA decode)"
    )


@dataclass(frozen=True)
class HeadLayout:
    """How the q heads of one request are spread over works.

    ``heads_per_work`` heads are processed by one work; ``fold_ratio`` virtual batches
    (head groups) stand for one real batch, ``fold_ratio == 1`` when native.
    """

    heads_per_work: int
    fold_ratio: int
    native: bool


HeadLayoutFn = Callable[[int, int, DtypeClass, DtypeClass], HeadLayout]
"""(num_heads_q, max_seqlen_qo, q class, kv class) -> layout; raises `PlanError`."""
PackedRowsFn = Callable[[int, int, DtypeClass, DtypeClass], int]
"""(heads_per_work, max_seqlen_qo, q class, kv class) -> packed q rows per program."""
SizingTilesFn = Callable[[int, int, DtypeClass, DtypeClass], int]
"""(num_heads_q, effective max_seqlen_qo, q class, kv class) -> qo tiles per batch sized."""
GranularityFn = Callable[[int], int]
"""page_size -> the kv granularity (in pages) a builder passes to the planner."""


def _aiter_granularity(page_size: int) -> int:
    """AITER's callers (vLLM, op_tests) pass ``max(page_size, 16)`` pages."""
    return max(page_size, 16)


@dataclass(frozen=True)
class ArchProfile:
    """One kernel family's planning rules: a data record plus predicate functions.

    ``qo_split_heads`` names the head count that gates qo splitting: ``"query"`` (the
    unfolded head count, AITER) or ``"work"`` (heads per work). ``folded_batch_tail``
    names the causal trim of a folded tile: ``"aiter"`` reproduces v1.2's folded formula
    ``ntiles - (qo_start // ratio) % uni_seqlen_qo - 1``, ``"tile"`` uses the unfolded
    ``ntiles - 1 - tile`` (the exact trim when a tile holds one token).
    """

    name: str
    description: str
    head_layout: HeadLayoutFn
    packed_rows_per_program: PackedRowsFn
    sizing_tiles_per_batch: SizingTilesFn
    qo_split_heads: Literal["query", "work"]
    folded_batch_tail: Literal["aiter", "tile"]
    default_kv_granularity: GranularityFn = _aiter_granularity
    occupancy: int = 1

    def qo_splits(
        self, *, num_heads_q: int, heads_per_work: int, max_seqlen_qo: int, packed_rows: int
    ) -> bool:
        """Whether a request's q tokens are split over several qo tiles.

        Off when ``0 < max_seqlen_qo * heads <= packed_rows``, on otherwise.
        """
        heads = num_heads_q if self.qo_split_heads == "query" else heads_per_work
        packed = max_seqlen_qo * heads
        return not (0 < packed <= packed_rows)

    @staticmethod
    def num_qo_tiles(*, seqlen_qo: int, heads_per_work: int, packed_rows: int, splits: bool) -> int:
        """Number of qo tiles of one (virtual) batch with ``seqlen_qo`` q tokens."""
        if not splits:
            return 1
        if 2 * heads_per_work > packed_rows:
            return seqlen_qo
        return -(-seqlen_qo * heads_per_work // packed_rows)


# ---------------------------------------------------------------------------------------
# AITER v1.2 (gfx942 / gfx950), AITER_ENABLE_EXPERIMENTAL unset.


def _aiter_native(arch: str, heads: int, max_sq: int, q: DtypeClass, kv: DtypeClass) -> bool:
    """v1.2's ``natively_supported`` predicate (without the experimental HK MTP case)."""
    fp8 = q == "fp8" and kv == "fp8"
    no_fp8 = q != "fp8" and kv != "fp8"
    return (
        heads == 16
        or (heads == 64 and fp8 and max_sq == 1)
        or (arch == "gfx950" and no_fp8)
        or (arch == "gfx942" and heads == 128 and fp8)
        or (arch == "gfx950" and fp8 and heads in (32, 64, 128))
    )


def _aiter_supported_after_fold(
    arch: str, heads: int, max_sq: int, native: bool, q: DtypeClass, kv: DtypeClass
) -> bool:
    """v1.2's AITER_CHECK on the (possibly folded) head count."""
    fp8 = q == "fp8" and kv == "fp8"
    no_fp8 = q != "fp8" and kv != "fp8"
    return (
        native
        or heads in (16, 128)
        or (heads == 32 and fp8)
        or (heads == 64 and fp8 and max_sq == 1)
        or (arch == "gfx950" and heads == 8 and max_sq == 4 and fp8)
        or (arch == "gfx942" and heads == 8 and max_sq == 2 and no_fp8)
        or (arch == "gfx950" and no_fp8)
        or (arch == "gfx950" and fp8 and ((heads == 32 and max_sq == 4) or heads in (64, 128)))
    )


def _aiter_head_layout(arch: str) -> HeadLayoutFn:
    def layout(num_heads_q: int, max_seqlen_qo: int, q: DtypeClass, kv: DtypeClass) -> HeadLayout:
        native = _aiter_native(arch, num_heads_q, max_seqlen_qo, q, kv)
        heads, ratio = num_heads_q, 1
        if not native and num_heads_q % 16 == 0:
            heads, ratio = 16, num_heads_q // 16
        if not _aiter_supported_after_fold(arch, heads, max_seqlen_qo, native, q, kv):
            raise PlanError(
                f"num_heads_q: {num_heads_q} heads with max_seqlen_qo={max_seqlen_qo}, "
                f"q {q}, kv {kv} has no {arch} persistent kernel (neither native nor "
                f"foldable to 16 heads)"
            )
        return HeadLayout(heads_per_work=heads, fold_ratio=ratio, native=native)

    return layout


def _aiter_packed_rows(arch: str) -> PackedRowsFn:
    def packed_rows(heads: int, max_seqlen_qo: int, q: DtypeClass, kv: DtypeClass) -> int:
        packed = heads * max_seqlen_qo
        if (
            arch == "gfx950"
            and q != "fp8"
            and kv != "fp8"
            and packed >= 64
            and heads <= 64
            and (packed < 128 or heads == 48)
        ):
            return 64
        if arch == "gfx950" and q == "fp8" and kv == "fp8" and heads == 32 and max_seqlen_qo == 3:
            return 64
        return 128

    return packed_rows


def _aiter_sizing_tiles(arch: str) -> SizingTilesFn:
    """``max_qo_tiles_per_batch`` of ``get_mla_metadata_info_v1`` (its own predicate)."""

    def tiles(heads: int, eff_sq: int, q: DtypeClass, kv: DtypeClass) -> int:
        packed = eff_sq * heads
        bf16 = q == "bf16" and kv == "bf16"
        fp8 = q == "fp8" and kv == "fp8"
        if (
            arch == "gfx950"
            and bf16
            and packed >= 64
            and heads <= 64
            and (packed < 128 or heads == 48)
        ) or (arch == "gfx950" and fp8 and heads == 32 and eff_sq == 3):
            return eff_sq if 2 * heads > 64 else math.ceil(packed / 64)
        if (
            heads == 16
            or (arch == "gfx942" and heads == 128 and fp8)
            or (arch == "gfx950" and fp8 and ((heads == 32 and eff_sq == 4) or heads in (64, 128)))
            or (heads == 64 and fp8 and eff_sq == 1)
        ):
            return math.ceil(packed / 128)
        if arch == "gfx950" and (packed >= 128 or heads > 64) and bf16 and heads != 48:
            return eff_sq if 2 * heads > 128 else math.ceil(packed / 128)
        return math.ceil(packed / 16)

    return tiles


def _aiter_profile(arch: str, description: str) -> ArchProfile:
    return ArchProfile(
        name=arch,
        description=description,
        head_layout=_aiter_head_layout(arch),
        packed_rows_per_program=_aiter_packed_rows(arch),
        sizing_tiles_per_batch=_aiter_sizing_tiles(arch),
        qo_split_heads="query",
        folded_batch_tail="aiter",
    )


# ---------------------------------------------------------------------------------------
# The suite's CUDA Triton persistent kernel.

TRITON_HEADS_PER_PROGRAM = 64
TRITON_PACKED_ROWS = 64


def _triton_head_layout(
    num_heads_q: int, max_seqlen_qo: int, q: DtypeClass, kv: DtypeClass
) -> HeadLayout:
    if num_heads_q <= TRITON_HEADS_PER_PROGRAM:
        return HeadLayout(heads_per_work=num_heads_q, fold_ratio=1, native=True)
    if num_heads_q % TRITON_HEADS_PER_PROGRAM != 0:
        raise PlanError(
            f"num_heads_q: {num_heads_q} heads exceed {TRITON_HEADS_PER_PROGRAM} per program "
            f"and are not a multiple of {TRITON_HEADS_PER_PROGRAM}, so they cannot be folded "
            f"(triton profile)"
        )
    return HeadLayout(
        heads_per_work=TRITON_HEADS_PER_PROGRAM,
        fold_ratio=num_heads_q // TRITON_HEADS_PER_PROGRAM,
        native=False,
    )


def _triton_granularity(page_size: int) -> int:
    """Blocks of at least 16 tokens, one page once pages hold 16 tokens or more (finer
    splits than AITER's rule, which makes 4096-token blocks at page size 64)."""
    return max(1, 16 // page_size)


def _triton_packed_rows(heads: int, max_seqlen_qo: int, q: DtypeClass, kv: DtypeClass) -> int:
    return TRITON_PACKED_ROWS


def _triton_sizing_tiles(heads: int, eff_sq: int, q: DtypeClass, kv: DtypeClass) -> int:
    """Tiles per real batch: fold ratio times the most qo tiles of one virtual batch."""
    layout = _triton_head_layout(heads, eff_sq, q, kv)
    splits = TRITON.qo_splits(
        num_heads_q=heads,
        heads_per_work=layout.heads_per_work,
        max_seqlen_qo=eff_sq,
        packed_rows=TRITON_PACKED_ROWS,
    )
    per_virtual = ArchProfile.num_qo_tiles(
        seqlen_qo=eff_sq,
        heads_per_work=layout.heads_per_work,
        packed_rows=TRITON_PACKED_ROWS,
        splits=splits,
    )
    return layout.fold_ratio * per_virtual


GFX942 = _aiter_profile("gfx942", "AMD MI300 (CDNA3), AITER v1.2 fast-mode planner")
GFX950 = _aiter_profile("gfx950", "AMD MI350 (CDNA4), AITER v1.2 fast-mode planner")
TRITON = ArchProfile(
    name="triton",
    description="the suite's CUDA Triton persistent MLA decode kernel",
    head_layout=_triton_head_layout,
    packed_rows_per_program=_triton_packed_rows,
    sizing_tiles_per_batch=_triton_sizing_tiles,
    qo_split_heads="work",
    folded_batch_tail="tile",
    default_kv_granularity=_triton_granularity,
)

_PROFILES: dict[str, ArchProfile] = {p.name: p for p in (GFX942, GFX950, TRITON)}
PROFILES: Mapping[str, ArchProfile] = MappingProxyType(_PROFILES)
"""Known profiles by arch name (read-only view; add one with `register_profile`)."""


def register_profile(profile: ArchProfile) -> None:
    """Add a backend's profile; an arch name can be registered once."""
    if profile.name in _PROFILES:
        raise PlanError(f"arch: profile {profile.name!r} is already registered")
    _PROFILES[profile.name] = profile


def get_profile(arch: str) -> ArchProfile:
    """The profile of ``arch``; unknown names raise `PlanError` listing the known ones."""
    try:
        return _PROFILES[arch]
    except (KeyError, TypeError):
        known = ", ".join(sorted(_PROFILES))
        raise PlanError(f"arch: unknown arch {arch!r}; known: {known}") from None
