"""The ``aiter`` that vLLM's ROCM_AITER_MLA builder imports on a CPU: the suite's planner.

vLLM's `AiterMLAMetadataBuilder` sizes its persistent-decode buffers with
``aiter.get_mla_metadata_info_v1`` and fills them with ``aiter.get_mla_metadata_v1``. On a
machine without AMD AITER, `install_standin` puts a module ``aiter`` into ``sys.modules``
whose two functions answer with the suite's reference (`metadata_buffer_sizes`,
`plan_persistent_decode`), with AITER's signatures; every call is kept in `AiterStandin.calls`
so the engine's planner arguments (#46997: the run's fp8 dtypes) can be checked. The module
carries ``__standin__ = True``; nothing obtained with it is reported as an AITER run.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from conformance.persistent.plan import WorkPlan
from conformance.persistent.planner import plan_persistent_decode
from conformance.persistent.sizing import metadata_buffer_sizes

MODULES = ("aiter", "aiter.dtypes")
MLA_VERSION_V32 = 0
BUFFER_PARAMETERS = slice(6, 12)  # get_mla_metadata_v1's six buffers, work_metadata_ptrs first


@dataclass(frozen=True)
class PlannerCall:
    """One call of ``get_mla_metadata_v1``: its keyword view and the plan it produced."""

    arguments: dict[str, Any]
    plan: WorkPlan


@dataclass(eq=False)
class AiterStandin:
    """AITER's planner API for one fake device (``arch``, ``num_cus``).

    The two calls keep AITER's signatures and argument handling (legacy ``dtype_q``/``dtype_kv``
    aliases, None means bf16, sizing's ``== dtypes.fp8`` comparisons); what is done with the
    arguments goes through small hooks (`check_sizing`, `check_planner_call`, `plan`,
    `record_plan`, `write_plan`, `api`) that a stricter model of AITER overrides.
    """

    arch: str
    num_cus: int
    fp8: torch.dtype
    calls: list[PlannerCall] = field(default_factory=list)
    sizing_calls: list[dict[str, Any]] = field(default_factory=list)
    version: ClassVar[str] = "0.0.0+conformance-standin"

    # -- hooks --------------------------------------------------------------------------

    def sizing_cus(self) -> int:
        """The CU count the buffer sizing reads."""
        return self.num_cus

    def check_sizing(self, arguments: dict[str, Any]) -> None:
        """Refuse sizing arguments the stand-in does not model (here: none)."""

    def check_planner_call(self, arguments: dict[str, Any], dtypes: PlannerDtypes) -> None:
        """Refuse planner arguments the stand-in does not model (here: none)."""

    def plan(
        self, inputs: tuple[torch.Tensor, ...], max_seqlen_qo: int, planned: dict[str, Any]
    ) -> WorkPlan:
        """The reference plan for AITER's inputs."""
        return plan_persistent_decode(*inputs, max_seqlen_qo=max_seqlen_qo, **planned)

    def record_plan(self, arguments: dict[str, Any], plan: WorkPlan) -> None:
        """Keep the call in `calls`."""
        self.calls.append(PlannerCall(arguments, plan))

    def write_plan(self, plan: WorkPlan, buffers: dict[str, torch.Tensor]) -> None:
        """Write the plan at the start of AITER's buffers (they are upper bounds)."""
        _write(buffers["work_indptr"], plan.work_indptr)
        _write(buffers["work_info_set"], plan.work_info_set[: plan.num_works])
        _write(buffers["reduce_indptr"], plan.reduce_indptr[: plan.num_tiles + 1])
        _write(buffers["reduce_final_map"], plan.reduce_final_map)
        _write(buffers["reduce_partial_map"], plan.reduce_partial_map[: plan.num_partials])

    def api(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """What the ``aiter`` module exposes for one of the calls (here: the call itself)."""
        return function

    # -- aiter.get_mla_metadata_info_v1 --------------------------------------------------

    def sizing_dtype(self, dtype: object) -> torch.dtype:
        """What AITER's ``== dtypes.fp8`` / ``== dtypes.bf16`` see: else ("neither") fp16."""
        if dtype == self.fp8 or dtype == torch.bfloat16:
            return dtype  # type: ignore[return-value]
        return torch.float16

    def get_mla_metadata_info_v1(
        self,
        batch_size: int,
        max_seqlen_qo: int,
        num_head_qo: int,
        q_dtype: torch.dtype,
        kv_dtype: torch.dtype,
        is_sparse: bool,
        fast_mode: bool = True,
        num_kv_splits: int = 32,
        intra_batch_mode: bool = False,
        max_split_per_batch: int = -1,
    ) -> tuple[tuple[Any, torch.dtype], ...]:
        """Six ``(shape, dtype)`` pairs, 1-D shapes as bare ints, as AITER returns them."""
        arguments = {k: v for k, v in locals().items() if k != "self"}
        self.sizing_calls.append(arguments)
        self.check_sizing(arguments)
        sizes = metadata_buffer_sizes(
            batch_size,
            max_seqlen_qo,
            num_head_qo,
            self.sizing_dtype(q_dtype),
            self.sizing_dtype(kv_dtype),
            arch=self.arch,
            num_cus=self.sizing_cus(),
            is_sparse=is_sparse,
            fast_mode=fast_mode,
            max_split_per_batch=max_split_per_batch,
        )
        return tuple((shape[0] if len(shape) == 1 else shape, dtype) for shape, dtype in sizes)

    # -- aiter.get_mla_metadata_v1 -------------------------------------------------------

    def get_mla_metadata_v1(
        self,
        seqlens_qo_indptr: torch.Tensor,
        seqlens_kv_indptr: torch.Tensor,
        kv_last_page_lens: torch.Tensor,
        num_heads_per_head_k: int,
        num_heads_k: int,
        is_causal: bool,
        work_metadata_ptrs: torch.Tensor,
        work_info_set: torch.Tensor,
        work_indptr: torch.Tensor,
        reduce_indptr: torch.Tensor,
        reduce_final_map: torch.Tensor,
        reduce_partial_map: torch.Tensor,
        page_size: int = 1,
        kv_granularity: int = 16,
        max_seqlen_qo: int = -1,
        uni_seqlen_qo: int = -1,
        fast_mode: bool = True,
        topk: int = -1,
        max_split_per_batch: int = -1,
        intra_batch_mode: bool = False,
        is_cp_round_robin: bool = False,
        mla_version: int = MLA_VERSION_V32,
        dtype_q_nope: torch.dtype | None = None,
        dtype_q_rope: torch.dtype | None = None,
        dtype_kv_nope: torch.dtype | None = None,
        dtype_kv_rope: torch.dtype | None = None,
        dtype_q: torch.dtype | None = None,
        dtype_kv: torch.dtype | None = None,
    ) -> None:
        """Plan with the reference planner (None dtypes mean bf16, as in AITER); write back."""
        arguments = {k: v for k, v in locals().items() if k != "self"}
        dtypes = planner_dtypes(arguments)
        self.check_planner_call(arguments, dtypes)
        planned: dict[str, Any] = {
            "num_heads_q": num_heads_per_head_k * num_heads_k,
            "uni_seqlen_qo": uni_seqlen_qo,
            "page_size": page_size,
            "kv_granularity": kv_granularity,
            "causal": is_causal,
            "max_split_per_batch": max_split_per_batch,
            "q_dtype": dtypes.q_nope or torch.bfloat16,
            "kv_dtype": dtypes.kv_nope or torch.bfloat16,
            "arch": self.arch,
            "num_cus": self.num_cus,
        }
        inputs = (seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens)
        plan = self.plan(inputs, max_seqlen_qo, planned)
        self.record_plan(arguments, plan)
        self.write_plan(plan, dict(list(arguments.items())[BUFFER_PARAMETERS]))

    # -- the modules ---------------------------------------------------------------------

    def build_modules(self) -> dict[str, types.ModuleType]:
        """The ``aiter`` and ``aiter.dtypes`` modules backed by this stand-in."""
        dtypes = standin_module(
            "aiter.dtypes",
            fp8=self.fp8,
            bf16=torch.bfloat16,
            fp16=torch.float16,
            fp32=torch.float32,
            i32=torch.int32,
            u64=torch.uint64,
        )
        aiter = standin_module(
            "aiter",
            __version__=self.version,
            dtypes=dtypes,
            get_mla_metadata_info_v1=self.api(self.get_mla_metadata_info_v1),
            get_mla_metadata_v1=self.api(self.get_mla_metadata_v1),
        )
        return {"aiter": aiter, "aiter.dtypes": dtypes}


@dataclass(frozen=True)
class PlannerDtypes:
    """The four dtypes of a planner call after AITER's legacy aliases (None: not given)."""

    q_nope: torch.dtype | None
    q_rope: torch.dtype | None
    kv_nope: torch.dtype | None
    kv_rope: torch.dtype | None


def planner_dtypes(arguments: dict[str, Any]) -> PlannerDtypes:
    """``dtype_q``/``dtype_kv`` fill only the nope and rope dtypes that were not given."""
    q, kv = arguments["dtype_q"], arguments["dtype_kv"]
    return PlannerDtypes(
        *(arguments[f"dtype_q_{part}"] or q for part in ("nope", "rope")),
        *(arguments[f"dtype_kv_{part}"] or kv for part in ("nope", "rope")),
    )


def standin_module(name: str, **attributes: Any) -> types.ModuleType:
    """A module `name` marked ``__standin__``, with a spec (``find_spec`` answers for it)."""
    module = types.ModuleType(name, f"stand-in of {name} (not AMD AITER)")
    module.__dict__.update(__standin__=True, **attributes)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return module


def _write(buffer: torch.Tensor, values: torch.Tensor) -> None:
    """Write `values` at the start of `buffer` (a prefix: AITER's buffers are upper bounds)."""
    flat = buffer.view(-1)
    data = values.reshape(-1).to(buffer.dtype)
    if data.numel() > flat.numel():
        raise ValueError(f"plan needs {data.numel()} entries, buffer holds {flat.numel()}")
    flat[: data.numel()] = data


def install_standin(standin: AiterStandin) -> dict[str, types.ModuleType | None]:
    """Put the stand-in's modules into ``sys.modules``; returns what they replaced."""
    previous = {name: sys.modules.get(name) for name in MODULES}
    sys.modules.update(standin.build_modules())
    return previous


def restore(previous: dict[str, types.ModuleType | None]) -> None:
    """Undo `install_standin`."""
    for name, module in previous.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
