"""A test double of AMD AITER's Python API, for the ROCm adapter's wiring tests only.

`AiterStandin` builds in-process modules ``aiter``, ``aiter.dtypes``, ``aiter.mla`` and
``aiter.jit.utils.chip_info`` with AITER's exact signatures (positional order, defaults) for
the three calls the adapter makes, and `AiterStandin.install` puts them into ``sys.modules``
through a pytest ``monkeypatch``. The planner half is the suite's own stand-in
(`conformance.engines.vllm.aiter_standin`), made stricter through its hooks. Behind the
signatures:

- ``get_mla_metadata_info_v1`` is the suite's `metadata_buffer_sizes`, with AITER's dtype
  comparisons (``q_dtype == dtypes.fp8``, ``== dtypes.bf16``: any other dtype, None
  included, is "neither") and the CU count of ``get_cu_num()``;
- ``get_mla_metadata_v1`` is the reference planner with AITER's argument handling: legacy
  ``dtype_q``/``dtype_kv`` aliases, **None means bf16**, rope dtypes default to the nope
  ones, a dtype outside ``aiter.dtypes`` (the other fp8 flavour) is rejected, the CU count
  is the device's (not ``get_cu_num()``), and results are written through the buffers as raw
  memory: whatever is passed in a buffer position is written, a write past a buffer's end is
  truncated and logged in `out_of_bounds` (on hardware it corrupts the neighbouring memory);
  ``max_seqlen_qo=-1`` (AITER's default) is reproduced where it is exact (gfx942, 16 heads,
  at most 8 q tokens: qo-splitting on gives one tile, tail threshold off);
- ``mla.mla_decode_fwd`` (fake_aiter_decode.py) reads the work lists through
  ``work_meta_data``'s pointers, folds heads by ``aiter/mla.py``'s own predicate (not the
  plan's), applies AITER's batch gate (``AITER_MLA_DECODE_PERSISTENT_MAX_BATCH``, read once)
  and computes with `kernels.plan_exec.execute_plan` (AITER's fp8 rule: P rounded to q's fp8
  dtype); its kernels are AITER's vendored tables (``aiter.jit.core.AITER_ASM_DIR`` points at
  them): a lookup AITER would fail raises `AiterAbort` (or really aborts), and
  ``unscaled_v=True`` is the ROCm/aiter#6732 defect (V not scaled by ``kv_scale``).

Inputs the stand-in does not reproduce raise `StandinLimitation`. Every module carries
``__standin__ = True``: the adapter refuses it unless a selftest sets
``backends.rocm.probe.ALLOW_STANDIN``, so results obtained with it can never be reported as
a rocm conformance run.
"""

from __future__ import annotations

import functools
import runpy
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.rocm.kernel_table import VENDORED_ASM_DIR
from conformance.engines.vllm.aiter_standin import MLA_VERSION_V32, PlannerDtypes, standin_module
from conformance.engines.vllm.aiter_standin import AiterStandin as PlannerStandin
from conformance.numerics.fp8 import fp8_dtype_for_arch
from conformance.persistent.plan import WorkPlan
from conformance.persistent.planner import plan_with_walk

# The decode half (fake_aiter_decode.py is a helper, not a test module).
_DECODE = runpy.run_path(str(Path(__file__).with_name("fake_aiter_decode.py")))
DecodeStandin, StandinLimitation = _DECODE["DecodeStandin"], _DECODE["StandinLimitation"]
AiterAbort = _DECODE["AiterAbort"]
GATE_ENV, GATE_DEFAULT = _DECODE["GATE_ENV"], _DECODE["GATE_DEFAULT"]
STANDIN_VERSION = "0.0.0+selftest-standin"


@dataclass(frozen=True)
class StandinCall:
    """One call into the stand-in: the function's name and its raw arguments."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class AiterStandin(DecodeStandin, PlannerStandin):
    """AITER for one fake device: ``arch``, ``num_cus`` (hipDeviceProp) and ``cu_num``
    (``get_cu_num()``, AITER's ``CU_NUM`` or rocminfo; defaults to ``num_cus``).

    The planner calls are the product stand-in's (`PlannerStandin`), made stricter through its
    hooks: inputs it does not model raise, writes go through raw memory, every call is logged.
    """

    version = STANDIN_VERSION
    calls: list[StandinCall]  # type: ignore[assignment]

    def __init__(
        self,
        *,
        arch: str,
        num_cus: int,
        cu_num: int | None = None,
        fp8: torch.dtype | None = None,
        unscaled_v: bool = False,
        really_abort: bool = False,
    ) -> None:
        super().__init__(arch, num_cus, fp8_dtype_for_arch(arch) if fp8 is None else fp8)
        self.cu_num = num_cus if cu_num is None else cu_num
        self.unscaled_v, self.really_abort = unscaled_v, really_abort
        self.decode_paths: list[str] = []
        self.out_of_bounds: list[str] = []
        self._gate: int | None = None
        self.modules = self.build_modules()

    # -- installation -----------------------------------------------------------------

    def api(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function` (a bound method with AITER's signature) that logs its raw call."""

        @functools.wraps(function)
        def entry(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(StandinCall(function.__name__, args, kwargs))
            return function(*args, **kwargs)

        return entry

    def build_modules(self) -> dict[str, types.ModuleType]:
        made = super().build_modules()
        chip_info = standin_module(
            "aiter.jit.utils.chip_info", get_gfx=lambda: self.arch, get_cu_num=lambda: self.cu_num
        )
        utils = standin_module("aiter.jit.utils", chip_info=chip_info)
        core = standin_module("aiter.jit.core", AITER_ASM_DIR=f"{VENDORED_ASM_DIR}/")
        jit = standin_module("aiter.jit", utils=utils, core=core)
        mla = standin_module(
            "aiter.mla",
            mla_decode_fwd=self.api(self.mla_decode_fwd),
            _persistent_mla_decode_max_batch=self._persistent_mla_decode_max_batch,
        )
        made["aiter"].__dict__.update(mla=mla, jit=jit)
        return {
            **made,
            "aiter.mla": mla,
            "aiter.jit": jit,
            "aiter.jit.utils": utils,
            "aiter.jit.core": core,
            "aiter.jit.utils.chip_info": chip_info,
        }

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Put the stand-in modules into ``sys.modules`` for the test's duration."""
        for name, made in self.modules.items():
            monkeypatch.setitem(sys.modules, name, made)

    def calls_to(self, name: str) -> list[StandinCall]:
        """The logged calls of one function, oldest first."""
        return [call for call in self.calls if call.name == name]

    # -- the planner's hooks ----------------------------------------------------------

    def sizing_cus(self) -> int:
        return self.cu_num  # ``get_cu_num()``, not the device's

    def check_sizing(self, arguments: dict[str, Any]) -> None:
        assert arguments["num_head_qo"] % 8 == 0
        if arguments["intra_batch_mode"] or not arguments["fast_mode"]:
            raise StandinLimitation("only fast_mode=True, intra_batch_mode=False is modelled")

    def check_planner_call(self, arguments: dict[str, Any], dtypes: PlannerDtypes) -> None:
        known = (self.fp8, torch.bfloat16, torch.float16, torch.float32)
        for dtype in (dtypes.q_nope, dtypes.q_rope, dtypes.kv_nope, dtypes.kv_rope):
            if dtype is not None and dtype not in known:  # AITER's ``_aiter_dtype_id``
                raise AssertionError(f"Unsupported dtype: {dtype}")
        if arguments["num_heads_k"] != 1:
            raise StandinLimitation(f"num_heads_k={arguments['num_heads_k']}: MLA has one kv head")
        unmodelled = ("intra_batch_mode", "is_cp_round_robin")
        if (
            arguments["topk"] >= 0
            or not arguments["fast_mode"]
            or any(arguments[name] for name in unmodelled)
        ):
            raise StandinLimitation("only the dense fast-mode (v1.2) planner is modelled")
        if arguments["mla_version"] != MLA_VERSION_V32:
            raise StandinLimitation(f"mla_version={arguments['mla_version']}: only V32 is modelled")

    def plan(
        self, inputs: tuple[torch.Tensor, ...], max_seqlen_qo: int, planned: dict[str, Any]
    ) -> WorkPlan:
        if max_seqlen_qo >= 1:
            return super().plan(inputs, max_seqlen_qo, planned)
        return self._plan_without_max_seqlen(inputs, planned)

    def record_plan(self, arguments: dict[str, Any], plan: WorkPlan) -> None:
        """Nothing beyond the raw call `api` logged."""

    def _plan_without_max_seqlen(
        self, inputs: tuple[torch.Tensor, ...], planned: dict[str, Any]
    ) -> WorkPlan:
        """AITER's plan for ``max_seqlen_qo=-1``, where the reference can reproduce it."""
        longest = int((inputs[0][1:] - inputs[0][:-1]).max())
        if self.arch != "gfx942" or planned["num_heads_q"] != 16 or longest > 8:
            raise StandinLimitation(
                "max_seqlen_qo=-1 is modelled for gfx942, 16 heads, <= 8 q tokens only"
            )
        # 16 heads are native with 128 packed rows: the forced qo split gives one tile per
        # batch, as planning with the true maximum does; the tail threshold (-1) never fires.
        return plan_with_walk(
            *inputs, max_seqlen_qo=longest, walk="literal", tail_rule=False, **planned
        )

    def _store(self, name: str, buffer: torch.Tensor, values: torch.Tensor, offset: int) -> None:
        """Write `values` into `buffer`'s memory at element `offset`, as a raw pointer would."""
        flat = buffer.view(-1)
        data = values.reshape(-1).to(buffer.dtype)
        room = max(flat.numel() - offset, 0)
        if data.numel() > room:
            self.out_of_bounds.append(
                f"{name}: {data.numel()} entries written at {offset} into {flat.numel()}"
            )
            data = data[:room]
        flat[offset : offset + data.numel()] = data

    def write_plan(self, plan: WorkPlan, buffers: dict[str, torch.Tensor]) -> None:
        """The planner's writes, into whatever tensors sit in the buffer positions."""
        pointers = [buffers["work_indptr"].data_ptr(), buffers["work_info_set"].data_ptr()]
        self._store(
            "work_metadata_ptrs",
            buffers["work_metadata_ptrs"],
            torch.tensor(pointers, dtype=torch.uint64),
            0,
        )
        self._store("work_indptr", buffers["work_indptr"], plan.work_indptr, 0)
        self._store(
            "work_info_set", buffers["work_info_set"], plan.work_info_set[: plan.num_works], 0
        )
        reduce = buffers["reduce_indptr"]
        head = plan.reduce_indptr[: plan.num_tiles + 1]
        pad = torch.full((max(reduce.numel() - head.numel(), 0),), plan.num_partials)
        self._store("reduce_indptr", reduce, torch.cat([head, pad.to(head.dtype)]), 0)
        for tile in plan.split_tiles():
            self._store(
                "reduce_final_map",
                buffers["reduce_final_map"],
                plan.reduce_final_map[tile],
                2 * tile,
            )
        self._store(
            "reduce_partial_map",
            buffers["reduce_partial_map"],
            plan.reduce_partial_map[: plan.num_partials],
            0,
        )


def install_standin_backend(
    monkeypatch: pytest.MonkeyPatch, *, arch: str = "gfx942", num_cus: int = 8, **standin: Any
) -> tuple[Any, AiterStandin]:
    """A fresh `RocmAiterBackend` on a fake CPU "device" over an installed stand-in.

    Fakes the adapter's own probes (``torch_hip_version``, ``probe_device``), installs the
    stand-in modules, sets ``ALLOW_STANDIN`` and pins the persistent gate, all undone at the
    end of the test. Returns ``(backend, standin)``.
    """
    from backends.rocm import probe
    from backends.rocm.backend import RocmAiterBackend

    made = AiterStandin(arch=arch, num_cus=num_cus, **standin)
    made.install(monkeypatch)
    device = probe.RocmDevice(torch.device("cpu"), arch, num_cus, f"stand-in {arch}")
    monkeypatch.setattr(probe, "ALLOW_STANDIN", True)
    monkeypatch.setattr(probe, "torch_hip_version", lambda: "6.4.0-standin")
    monkeypatch.setattr(probe, "probe_device", lambda: device)
    monkeypatch.setenv(GATE_ENV, "0")
    return RocmAiterBackend(), made
