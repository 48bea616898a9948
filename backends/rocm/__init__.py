"""The ROCm backend: AMD AITER's persistent MLA decode behind the suite's `Backend` interface.

Planning and decoding go through AITER's public Python API (ROCm/aiter: ``aiter/ops/attention.py``
for the planner, ``aiter/mla.py`` for ``mla_decode_fwd``):

- sizes: ``aiter.get_mla_metadata_info_v1(B, max_seqlen_qo, H, q_dtype, kv_dtype,
  is_sparse=False, fast_mode=True, intra_batch_mode=False, max_split_per_batch=...)``;
- plan: ``aiter.get_mla_metadata_v1(qo_indptr, kv_indptr, kv_last_page_lens, H, 1, causal,
  work_metadata_ptrs, work_info_set, work_indptr, reduce_indptr, reduce_final_map,
  reduce_partial_map, page_size=..., kv_granularity=..., max_seqlen_qo=...,
  uni_seqlen_qo=..., fast_mode=True, max_split_per_batch=..., intra_batch_mode=False,
  dtype_q_nope=q, dtype_q_rope=q, dtype_kv_nope=kv, dtype_kv_rope=kv)`` — every dtype
  explicit, because AITER reads a missing one as bf16 (vLLM #46997), and the buffers in
  this call's order, which is *not* the info tuple's (``work_info_set`` first);
- decode: ``aiter.mla.mla_decode_fwd(q, kv_buffer[pages, page, 1, 576], o, qo_indptr,
  kv_indptr, kv_indices, kv_last_page_lens, max_seqlen_qo, page_size=..., nhead_kv=1,
  sm_scale=..., num_kv_splits=None, work_meta_data=..., <the five plan buffers>,
  q_scale=..., kv_scale=..., return_lse=<where an LSE kernel exists>, causal=...)`` in
  persistent mode, after looking the shape up in the installed AITER's kernel table
  (``hsa/<arch>/mla/mla_asm.csv``; a shape AITER would abort on is refused), with
  ``AITER_MLA_DECODE_PERSISTENT_MAX_BATCH=0`` pinned so that AITER never falls back to its
  non-persistent kernel (AITER #4144); ``o`` is prefilled with NaN.

The builder is the shared `MLACommonBuilder`; its ``planner`` is an `AiterPlanner`, a
callable taking the reference planner's keyword arguments, so the suite's planner spy sees
the same call for every backend. Availability needs a ROCm torch, a gfx942/gfx950 device,
an importable ``aiter`` whose API has the arguments above, and agreement between the
device and AITER on arch, CU count and fp8 flavour. ``aiter`` is imported only when the
backend is probed, never when this package is imported. A module marked ``__standin__``
(the selftests' test double) is refused unless `backends.rocm.probe.ALLOW_STANDIN` is set
by a selftest.

Modules, one concern each. This package re-exports the types and entry points only; patch a
probe, flag or helper in the module that looks it up (e.g. `backends.rocm.probe`), not here:

- `backends.rocm.api`: the AITER signatures and argument names the adapter targets, `AiterApi`;
- `backends.rocm.probe`: device, ROCm torch and ``aiter`` probes, the persistent-path gate,
  `probe_runtime` (availability);
- `backends.rocm.planner`: `AiterPlanner`, `AiterWorkPlan`, buffer allocation and the
  ``get_mla_metadata_v1`` arguments;
- `backends.rocm.kernel_table`: the installed AITER's MLA kernel table, the vendored copies;
- `backends.rocm.decode`: `aiter_decode`, the ``mla_decode_fwd`` call and the refusal of
  calls AITER would abort on (`AiterWouldAbort`);
- `backends.rocm.backend`: `RocmAiterBackend` and its bound builder.
"""

from __future__ import annotations

from backends.rocm.api import AiterApi
from backends.rocm.backend import RocmAiterBackend, RocmAiterBuilder
from backends.rocm.decode import aiter_decode
from backends.rocm.planner import AiterPlanner, AiterWorkPlan
from backends.rocm.probe import AiterRuntime, RocmDevice, probe_runtime

__all__ = [
    "AiterApi",
    "AiterPlanner",
    "AiterRuntime",
    "AiterWorkPlan",
    "RocmAiterBackend",
    "RocmAiterBuilder",
    "RocmDevice",
    "aiter_decode",
    "probe_runtime",
]
