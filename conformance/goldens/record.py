"""A loaded golden: its case, inputs, exact plan and reference output, and what to feed.

`load_golden` reads a verified file (`GoldenStore.load`) and checks that its tensors and
metadata agree with its case; `Golden` turns them into what a backend consumes: the
NaN-poisoned paged cache, the `CommonAttentionMetadata` of the batch, the builder config,
the `WorkPlan`, and a `DecodeMetadata` that feeds the golden plan to any backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import torch

from backends.base import BuilderConfig, DecodeMetadata, KVCacheSpec
from conformance.goldens.cases import GoldenCase
from conformance.goldens.store import GoldenError, GoldenStore, StoredGolden
from conformance.metadata.batch import BatchSpec, make_cam
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.metadata.record import CommonAttentionMetadata
from conformance.numerics.softmax_scale import DEFAULT_SM_SCALE
from conformance.persistent.plan import PLAN_BUFFERS, WorkPlan
from kernels.paged import token_slots

QK_DIM = DEEPSEEK_R1.dims.cache_width  # 576: latent (512) + rope key (64)
KV_LORA_RANK = DEEPSEEK_R1.dims.kv_lora_rank  # 512: the output row
SM_SCALE = DEFAULT_SM_SCALE
"""1/√576, the default softmax scale; a golden's own is `Golden.sm_scale` (its case's)."""

INPUT_TENSORS: tuple[str, ...] = (
    "q",
    "kv_tokens",
    "query_start_loc",
    "seq_lens",
    "block_table",
    "kv_indptr",
    "kv_indices",
    "kv_last_page_lens",
)
PLAN_TENSORS: tuple[str, ...] = tuple(f"plan.{name}" for name in PLAN_BUFFERS)
OUTPUT_TENSORS: tuple[str, ...] = ("out", "lse")
TENSOR_NAMES: tuple[str, ...] = (*INPUT_TENSORS, *PLAN_TENSORS, *OUTPUT_TENSORS)
META_KEYS: tuple[str, ...] = (
    "generator_version",
    "case",
    "num_blocks",
    "sm_scale",
    "q_scale",
    "kv_scale",
    "plan",
    "planner_call",
)
PLAN_SCALARS: tuple[str, ...] = tuple(
    f.name for f in dataclass_fields(WorkPlan) if f.name not in (*PLAN_BUFFERS, "params")
)
"""The plan's integer fields (``num_works`` ... ``max_seqlen_qo``)."""
_DTYPE_BY_NAME: dict[str, torch.dtype] = {
    str(d): d for d in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz)
}


def dtype_from_name(name: str) -> torch.dtype:
    """``"torch.bfloat16"`` → ``torch.bfloat16`` (q/kv dtypes only)."""
    try:
        return _DTYPE_BY_NAME[name]
    except KeyError:
        raise ValueError(
            f"dtype: expected one of {sorted(_DTYPE_BY_NAME)}, found {name!r}"
        ) from None


def plans_equal(a: WorkPlan, b: WorkPlan) -> bool:
    """Equal buffer shapes and equal written regions (what a conforming planner writes)."""
    if any(getattr(a, n).shape != getattr(b, n).shape for n in PLAN_BUFFERS):
        return False
    ra, rb = a.written_regions(), b.written_regions()
    return all(ra[k].shape == rb[k].shape and torch.equal(ra[k].cpu(), rb[k].cpu()) for k in ra)


def same_works(a: WorkPlan, b: WorkPlan) -> bool:
    """Whether two plans hold the same work list (ignoring how programs share it)."""
    wa, wb = a.work_info_set[: a.num_works].cpu(), b.work_info_set[: b.num_works].cpu()
    return wa.shape == wb.shape and torch.equal(wa, wb)


def kv_token_slots(
    block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int
) -> torch.Tensor:
    """Flat cache slot of every kv token, request after request, in position order."""
    slots = [
        token_slots(block_table[b], 0, int(n), page_size) for b, n in enumerate(seq_lens.tolist())
    ]
    return torch.cat(slots) if slots else torch.empty(0, dtype=torch.int64)


def poisoned_cache(
    kv_tokens: torch.Tensor,
    *,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    page_size: int,
    num_blocks: int,
    poison: float = float("nan"),
) -> torch.Tensor:
    """``[num_blocks, page_size, D]`` cache: every slot `poison` except the batch's tokens."""
    width = kv_tokens.shape[-1]
    flat = torch.full((num_blocks * page_size, width), poison).to(kv_tokens.dtype)
    flat[kv_token_slots(block_table, seq_lens, page_size)] = kv_tokens
    return flat.view(num_blocks, page_size, width)


@dataclass(frozen=True)
class Golden:
    """One verified golden: its case and stored content, with the feeding helpers."""

    case: GoldenCase
    stored: StoredGolden

    path = property(lambda self: self.stored.path, doc="The golden's file.")
    tensors = property(lambda self: self.stored.tensors, doc="The golden's tensors by name.")
    meta = property(lambda self: self.stored.meta, doc="The golden's metadata, from its file.")

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    q_scale = property(
        lambda self: float(self.meta["q_scale"]),
        doc="q's per-tensor scale as the kernel receives it (fp32-exact).",
    )
    kv_scale = property(
        lambda self: float(self.meta["kv_scale"]), doc="The cache's per-tensor scale (fp32-exact)."
    )
    sm_scale = property(
        lambda self: float(self.meta["sm_scale"]),
        doc="The softmax scale the decode receives (the case's: 1/√576 unless it names another).",
    )
    num_blocks = property(
        lambda self: int(self.meta["num_blocks"]),
        doc="Blocks of the paged cache (block 0 is the null block; spare blocks stay unused).",
    )

    # -- the plan ----------------------------------------------------------------------

    def plan(self) -> WorkPlan:
        """The exact plan of the golden (a fresh copy)."""
        scalars = self.meta["plan"]
        buffers = {name: self.tensors[f"plan.{name}"].clone() for name in PLAN_BUFFERS}
        return WorkPlan(
            **buffers,
            **{key: int(scalars[key]) for key in PLAN_SCALARS},
            params=dict(scalars.get("params", {})),
        )

    def planner_call(self) -> dict[str, Any]:
        """The keyword arguments the golden plan was made with (tensors and dtypes restored)."""
        call = dict(self.meta["planner_call"])
        call["q_dtype"] = dtype_from_name(call["q_dtype"])
        call["kv_dtype"] = dtype_from_name(call["kv_dtype"])
        call["qo_indptr"] = self.tensors["query_start_loc"].clone()
        call["kv_indptr"] = self.tensors["kv_indptr"].clone()
        call["kv_last_page_lens"] = self.tensors["kv_last_page_lens"].clone()
        return call

    # -- inputs ------------------------------------------------------------------------

    def kv_cache(
        self, device: torch.device | str = "cpu", *, poison: float = float("nan")
    ) -> torch.Tensor:
        """The paged cache with every slot past each sequence (and every unused block) NaN."""
        cache = poisoned_cache(
            self.tensors["kv_tokens"],
            block_table=self.tensors["block_table"],
            seq_lens=self.tensors["seq_lens"],
            page_size=self.case.page_size,
            num_blocks=self.num_blocks,
            poison=poison,
        )
        return cache.to(device)

    @property
    def poisoned_slots(self) -> int:
        """How many cache slots hold the poison (slots that belong to no kv token)."""
        return self.num_blocks * self.case.page_size - int(self.tensors["seq_lens"].sum())

    def q(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """q ``[tokens, heads, 576]`` in the case's dtype."""
        return self.tensors["q"].to(device)

    def cam(self, device: torch.device | str = "cpu") -> CommonAttentionMetadata:
        """The batch as a `CommonAttentionMetadata` whose block table is the golden's."""
        case = self.case
        if not case.via_builder:
            raise GoldenError(
                self.path,
                f"case {case.id} has kv lengths {case.seq_lens} below q_len {case.q_len}; "
                f"no CommonAttentionMetadata expresses it (feed decode_metadata() instead)",
            )
        pad = case.pad_rows
        spec = BatchSpec(
            (*case.seq_lens, *(0,) * pad), (*(case.q_len,) * case.batch, *(0,) * pad), case.id
        )
        table = self.tensors["block_table"]
        table = torch.cat([table, torch.zeros((pad, table.shape[1]), dtype=table.dtype)])
        new_tokens = [
            token_slots(table[b], n - case.q_len, n, case.page_size)
            for b, n in enumerate(case.seq_lens)
        ]
        cam = make_cam(
            spec,
            block_size=case.page_size,
            device=device,
            num_blocks=self.num_blocks,
            seed=case.seed,
            causal=case.causal,
            decode_threshold=case.q_len,
        )
        return cam.replace(
            block_table_tensor=table.to(device),
            slot_mapping=torch.cat(new_tokens).to(device),
        )

    def builder_fields(self, **changes: Any) -> dict[str, Any]:
        """`BuilderConfig` fields (no device) a builder for this golden is made with."""
        case = self.case
        fields: dict[str, Any] = {
            "model": DEEPSEEK_R1,
            "num_heads": case.heads,
            "kv_cache": KVCacheSpec(block_size=case.page_size, dtype=case.kv_torch_dtype),
            "q_dtype": case.q_torch_dtype,
            "max_num_seqs": max(case.batch, 8),
            "max_model_len": max(1024, max(case.seq_lens)),
            "decode_threshold": case.q_len,
            "arch": case.arch,
            "num_cus": case.num_cus,
            "max_split_per_batch": case.max_split_per_batch,
        }
        fields.update(changes)
        return fields

    def builder_config(self, device: torch.device | str = "cpu", **changes: Any) -> BuilderConfig:
        """The `BuilderConfig` of this golden on `device` (fields overridable)."""
        return BuilderConfig(device=str(device), **self.builder_fields(**changes))

    def decode_metadata(
        self,
        device: torch.device | str = "cpu",
        *,
        plan: WorkPlan | None = None,
        with_plan: bool = True,
    ) -> DecodeMetadata:
        """Decode metadata that feeds `plan` (default: the golden plan; none without
        `with_plan`, for a plan-free backend) to a backend.

        ``planner_call`` records the golden's planner arguments with ``causal`` set to the
        decode's mask; they differ only for a case planned non-causally because the causal
        planner refuses it (``plan_causal=False``, page size > 1, where the v1.2 plan does
        not depend on ``causal``).
        """
        t = self.tensors
        dev = torch.device(device)
        call = self.planner_call()
        call["causal"] = self.case.causal
        if with_plan:
            plan = (plan if plan is not None else self.plan()).to(dev)
        qsl = t["query_start_loc"]
        return DecodeMetadata(
            num_decodes=self.case.batch,
            num_decode_tokens=self.case.num_tokens,
            max_query_len=self.case.q_len,
            max_seq_len=max(self.case.seq_lens),
            query_start_loc=qsl.to(dev),
            query_start_loc_cpu=qsl.clone(),
            seq_lens=t["seq_lens"].to(dev),
            block_table=t["block_table"].to(dev),
            kv_indptr=t["kv_indptr"].to(dev),
            kv_indices=t["kv_indices"].to(dev),
            kv_last_page_lens=t["kv_last_page_lens"].to(dev),
            page_size=self.case.page_size,
            causal=self.case.causal,
            plan=plan if with_plan else None,
            planner_call=call if with_plan else {},
        )


def _expect(path: Path, ok: bool, message: str) -> None:
    if not ok:
        raise GoldenError(path, message)


def golden_from_stored(stored: StoredGolden) -> Golden:
    """Check a stored golden's content against its case and wrap it."""
    path, tensors, meta = stored.path, stored.tensors, stored.meta
    missing = [k for k in META_KEYS if k not in meta]
    _expect(path, not missing, f"metadata: missing keys {missing}")
    try:
        case = GoldenCase.from_json(meta["case"])
    except ValueError as exc:
        raise GoldenError(path, f"metadata: {exc}") from None
    _expect(
        path,
        case.id == stored.case_id and meta["case"] == stored.entry.case,
        f"metadata: case {case.id!r} differs from the manifest entry of {stored.case_id!r}",
    )
    absent = [n for n in TENSOR_NAMES if n not in tensors]
    _expect(path, not absent, f"missing tensors {absent}")
    tokens, heads = case.num_tokens, case.heads
    expected = {
        "q": (case.q_torch_dtype, (tokens, heads, QK_DIM)),
        "kv_tokens": (case.kv_torch_dtype, (sum(case.seq_lens), QK_DIM)),
        "query_start_loc": (torch.int32, (case.batch + 1,)),
        "seq_lens": (torch.int32, (case.batch,)),
        "kv_indptr": (torch.int32, (case.batch + 1,)),
        "kv_last_page_lens": (torch.int32, (case.batch,)),
        "out": (torch.float32, (tokens, heads, KV_LORA_RANK)),
        "lse": (torch.float32, (tokens, heads)),
    }
    for name, (dtype, shape) in expected.items():
        t = tensors[name]
        _expect(
            path,
            t.dtype == dtype and tuple(t.shape) == shape,
            f"tensor {name!r}: expected {dtype} {shape}, found {t.dtype} {tuple(t.shape)}",
        )
    for name in ("block_table", "kv_indices", *PLAN_TENSORS):
        _expect(
            path,
            tensors[name].dtype == torch.int32,
            f"tensor {name!r}: expected torch.int32, found {tensors[name].dtype}",
        )
    try:
        sm_scale = case.sm_scale
    except ValueError as exc:
        raise GoldenError(path, f"metadata: case {exc}") from None
    _expect(
        path,
        meta["sm_scale"] == sm_scale,
        f"metadata: sm_scale {meta['sm_scale']!r} differs from the case's "
        f"{case.softmax_scale} scale {sm_scale!r}",
    )
    _expect(
        path,
        tensors["seq_lens"].tolist() == list(case.seq_lens),
        f"tensor 'seq_lens': {tensors['seq_lens'].tolist()} differs from the case's "
        f"{list(case.seq_lens)}",
    )
    return Golden(case=case, stored=stored)


def load_golden(store: GoldenStore, case_id: str) -> Golden:
    """Load, verify (sha256) and check one golden."""
    return golden_from_stored(store.load(case_id))
