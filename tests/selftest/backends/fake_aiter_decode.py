"""The decode half of the AITER stand-in (fake_aiter.py): ``aiter.mla.mla_decode_fwd``.

`DecodeStandin` is a mixin of `AiterStandin` (it reads ``arch``, ``num_cus``, ``fp8`` and
records ``decode_paths``): it reads the work lists through ``work_meta_data``'s pointers,
folds heads by ``aiter/mla.py``'s own predicate (not the plan's), applies AITER's batch gate
(``AITER_MLA_DECODE_PERSISTENT_MAX_BATCH``, read once) and computes with
`kernels.plan_exec.execute_plan`. Its kernels are AITER's own tables (the vendored copies,
`backends.rocm.kernel_table`): a persistent call whose kernel lookup AITER's ``asm_mla.cu``
fails — no row, or ``return_lse=True`` with no LSE row — "aborts" (`AiterAbort`, or a real
``os.abort()`` with ``really_abort``). ``unscaled_v`` models ROCm/aiter#6732 (an fp8 kernel
that scales K but not V by ``kv_scale``). A helper, not a test module: fake_aiter.py loads it.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from backends.rocm.kernel_table import vendored_table
from conformance.aiter_kernels import choose
from conformance.applicability import dtype_label
from conformance.persistent.plan import WorkPlan
from conformance.persistent.planner import plan_persistent_decode
from kernels.plan_exec import execute_plan

GATE_ENV = "AITER_MLA_DECODE_PERSISTENT_MAX_BATCH"
GATE_DEFAULT = 32


class StandinLimitation(NotImplementedError):
    """An input whose AITER behaviour the stand-in does not reproduce."""


class AiterAbort(BaseException):
    """Stands for AITER's failed ``AITER_CHECK`` in a ctypes op: the process would abort.
    A BaseException, so that no ``except Exception`` in the code under test swallows it."""


class DecodeStandin:
    """``aiter.mla.mla_decode_fwd`` for one fake device (mixed into `AiterStandin`)."""

    arch: str
    num_cus: int
    fp8: torch.dtype
    decode_paths: list[str]
    _gate: int | None
    unscaled_v: bool
    really_abort: bool

    def _abort_unless_shipped(
        self, q: torch.Tensor, kv: torch.Tensor, max_seqlen_q: int, causal: bool, lse: bool
    ) -> None:
        """AITER's kernel lookup for a persistent call, over its own table of this arch."""
        choice = choose(
            vendored_table(self.arch),
            q_dtype=dtype_label(q.dtype),
            kv_dtype=dtype_label(kv.dtype),
            heads=int(q.shape[1]),
            q_len=max_seqlen_q,
            causal=causal,
        )
        missing = choice.reason if choice.kernel is None else None
        if missing is None and lse and choice.lse_kernel is None:
            missing = f"cannot get heuristic kernel! {choice.key} lse:1"
        if missing is None:
            return
        if self.really_abort:
            os.write(2, f"aiter stand-in: AITER_CHECK failed: {missing}\n".encode())
            os.abort()
        raise AiterAbort(f"AITER_CHECK failed (the process aborts): {missing}")

    def _persistent_mla_decode_max_batch(self) -> int:
        """AITER's gate value, read from the environment once (as its lru_cache does)."""
        if self._gate is None:
            try:
                self._gate = int(os.environ.get(GATE_ENV, GATE_DEFAULT))
            except ValueError:
                self._gate = GATE_DEFAULT
        return self._gate

    def _keeps_persistent(self, bs: int, nhead: int, max_seqlen_q: int, q: Any, kv: Any) -> bool:
        regression_profile = (
            self.arch == "gfx950"
            and q == torch.bfloat16
            and kv == torch.bfloat16
            and nhead == 16
            and max_seqlen_q == 1
        )
        if not regression_profile:
            return True
        limit = self._persistent_mla_decode_max_batch()
        return limit <= 0 or bs < limit

    def _kernel_fold(self, nhead: int, max_seqlen_q: int, q: Any, kv: Any) -> int:
        """``aiter/mla.py``'s native-or-fold decision (AITER_ENABLE_EXPERIMENTAL unset)."""
        fp8 = q == self.fp8 and kv == self.fp8
        bf16 = q == torch.bfloat16 and kv == torch.bfloat16
        gfx942, gfx950 = self.arch == "gfx942", self.arch == "gfx950"
        native = (
            nhead == 16
            or (gfx942 and nhead == 128 and fp8)
            or (gfx950 and fp8 and nhead in (32, 64, 128))
            or (gfx950 and nhead == 8 and fp8 and max_seqlen_q == 4)
            or (gfx942 and nhead == 8 and bf16 and max_seqlen_q == 2)
            or (gfx942 and nhead == 64 and fp8 and max_seqlen_q == 1)
            or (gfx950 and bf16)
        )
        if native:
            return 1
        if nhead in range(32, 129, 16):
            return nhead // 16
        raise AssertionError(f"nhead={nhead} and max_seqlen_q={max_seqlen_q} not supported")

    def _kernel_scales(
        self, q: torch.dtype, kv: torch.dtype, q_scale: object, kv_scale: object
    ) -> tuple[float, float]:
        """The scales the kernel applies, after AITER's dtype and scale requirements."""
        for name, dtype in (("q", q), ("kv_buffer", kv)):
            if dtype not in (torch.bfloat16, self.fp8):
                raise RuntimeError(f"{name}: no {self.arch} persistent MLA kernel for {dtype}")
        if q == self.fp8 and kv != self.fp8:
            raise RuntimeError("fp8 q with a bf16 kv buffer has no persistent MLA kernel")
        for name, scale in (("q_scale", q_scale), ("kv_scale", kv_scale)):
            if scale is not None and not (
                isinstance(scale, torch.Tensor)
                and scale.dtype == torch.float32
                and scale.numel() == 1
            ):
                raise TypeError(f"{name}: expected a fp32 [1] tensor or None, found {scale!r}")
        if q == self.fp8 and (q_scale is None or kv_scale is None):
            raise RuntimeError("fp8 q: the kernel needs both q_scale and kv_scale")
        q_s = float(q_scale.item()) if q == self.fp8 else 1.0  # type: ignore[union-attr]
        kv_s = float(kv_scale.item()) if kv == self.fp8 and kv_scale is not None else 1.0  # type: ignore[union-attr]
        return q_s, kv_s

    def _plan_from_buffers(
        self, buffers: dict[str, torch.Tensor], *, fold: int, nhead: int, max_seqlen_q: int
    ) -> WorkPlan:
        reduce = buffers["reduce_indptr"]
        return WorkPlan(
            **buffers,
            num_works=int(buffers["work_indptr"][-1]),
            num_partials=int(reduce[-1]),
            num_tiles=reduce.numel() - 1,
            fold_ratio=fold,
            heads_per_work=nhead // fold,
            max_seqlen_qo=max_seqlen_q,
        )

    def mla_decode_fwd(
        self,
        q: torch.Tensor,
        kv_buffer: torch.Tensor,
        o: torch.Tensor,
        qo_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        kv_indices: torch.Tensor,
        kv_last_page_lens: torch.Tensor,
        max_seqlen_q: int,
        page_size: int = 1,
        nhead_kv: int = 1,
        sm_scale: float | None = None,
        logit_cap: float = 0.0,
        num_kv_splits: int | None = None,
        num_kv_splits_indptr: torch.Tensor | None = None,
        work_meta_data: torch.Tensor | None = None,
        work_indptr: torch.Tensor | None = None,
        work_info_set: torch.Tensor | None = None,
        reduce_indptr: torch.Tensor | None = None,
        reduce_final_map: torch.Tensor | None = None,
        reduce_partial_map: torch.Tensor | None = None,
        q_scale: torch.Tensor | None = None,
        kv_scale: torch.Tensor | None = None,
        intra_batch_mode: bool = False,
        return_logits: bool = False,
        return_lse: bool = False,
        g_kv_indptr: torch.Tensor | None = None,
        cp_world_size: int = 1,
        cp_rank: int = 0,
        causal: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Decode into `o` in place; returns ``(partial logits, final_lse or None)``."""
        assert logit_cap <= 0, f"{logit_cap=} is not support yet"
        if kv_buffer.dim() != 4 or nhead_kv != 1 or kv_buffer.shape[2] != 1:
            raise StandinLimitation("only kv_buffer [num_page, page_size, 1, 576] is modelled")
        if intra_batch_mode or g_kv_indptr is not None or cp_world_size != 1:
            raise StandinLimitation("intra-batch and context-parallel modes are not modelled")
        if sm_scale is None:
            sm_scale = 1.0 / math.sqrt(kv_buffer.shape[-1])
        _, nhead, v_head_dim = o.shape
        batch = qo_indptr.shape[0] - 1
        q_s, kv_s = self._kernel_scales(q.dtype, kv_buffer.dtype, q_scale, kv_scale)
        persistent = work_meta_data is not None
        if persistent and num_kv_splits is None:
            persistent = self._keeps_persistent(
                batch, nhead, max_seqlen_q, q.dtype, kv_buffer.dtype
            )
        self.decode_paths.append("persistent" if persistent else "non-persistent")
        if persistent:
            pointers = [int(v) for v in work_meta_data.cpu().tolist()]  # type: ignore[union-attr]
            expected = [work_indptr.data_ptr(), work_info_set.data_ptr()]  # type: ignore[union-attr]
            if pointers != expected:
                raise RuntimeError(
                    f"work_meta_data holds {[hex(p) for p in pointers]}, not the addresses of "
                    f"work_indptr/work_info_set {[hex(p) for p in expected]}: the asm kernel "
                    f"reads its work lists through these pointers"
                )
            self._abort_unless_shipped(q, kv_buffer, int(max_seqlen_q), causal, return_lse)
            fold = self._kernel_fold(nhead, max_seqlen_q, q.dtype, kv_buffer.dtype)
            buffers = {
                "work_indptr": work_indptr,
                "work_info_set": work_info_set,
                "reduce_indptr": reduce_indptr,
                "reduce_final_map": reduce_final_map,
                "reduce_partial_map": reduce_partial_map,
            }
            plan = self._plan_from_buffers(
                buffers,
                fold=fold,
                nhead=nhead,
                max_seqlen_q=max_seqlen_q,  # type: ignore[arg-type]
            )
        else:  # AITER's split-KV kernel: modelled by a plan of its own
            lens = (qo_indptr[1:] - qo_indptr[:-1]).cpu()
            uniform = bool((lens == max_seqlen_q).all())
            plan = plan_persistent_decode(
                qo_indptr,
                kv_indptr,
                kv_last_page_lens,
                num_heads_q=nhead,
                max_seqlen_qo=max_seqlen_q,
                uni_seqlen_qo=max_seqlen_q if uniform else -1,
                page_size=page_size,
                kv_granularity=max(page_size, 16),
                causal=causal,
                max_split_per_batch=-1,
                q_dtype=q.dtype,
                kv_dtype=kv_buffer.dtype,
                arch=self.arch,
                num_cus=self.num_cus,
            )
        result = execute_plan(
            plan,
            q,
            kv_buffer,
            kv_indptr=kv_indptr,
            kv_indices=kv_indices,
            kv_last_page_lens=kv_last_page_lens,
            page_size=page_size,
            sm_scale=float(sm_scale),
            q_scale=q_s,
            kv_scale=kv_s,
            causal=causal,
            kv_lora_rank=v_head_dim,
        )
        written = ~torch.isnan(result.out).all(dim=-1)
        result_out = result.out / kv_s if self.unscaled_v else result.out  # aiter#6732
        o[written] = result_out[written].to(device=o.device, dtype=o.dtype)
        logits = result.partial_out.reshape(-1, 1, result.partial_out.shape[1], v_head_dim)
        return logits, (result.lse if return_lse else None)
