"""vLLM's own MLA decode on a GPU under the numerics and masking families.

For every implementation of `conformance.engines.vllm.decode.IMPLEMENTATIONS` that runs here
(TRITON_MLA; FLASHMLA on Hopper): each golden batch whose dtypes vLLM feeds that
implementation, built by vLLM's own builder from vLLM's own record, decoded by its
``forward_mqa`` over the NaN-poisoned cache in vLLM's layout, judged by the suite's derived
tolerances; the masking family's exact bounds at both softmax scales (a batch vLLM never
feeds an implementation, by its declared dtype pairs, is not collected for it). The output
and the LSE are judged in tests of their own (an LSE vLLM consumes only where decode context
parallelism merges ranks), so a known finding of one never hides the other. An implementation that
cannot run here is skipped with its reason. The negative controls break vLLM's path in three
ways (the layer's k-scale not applied, one decode ``seq_lens`` entry off by one, an fp8 cache
handed over as its uint8 storage) and must fail, in the same run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from backends.base import DecodeMetadata
from conformance.applicability import dtype_pair_id
from conformance.engines.vllm.decode import E4M3, IMPLEMENTATIONS, Fault, VllmDecodeBackend
from conformance.goldens.assertions import assert_result_matches, run_decode
from conformance.goldens.cases import GoldenCase
from conformance.goldens.masking_run import masking_failures
from conformance.goldens.record import Golden, load_golden
from conformance.goldens.relayout import for_backend, relaid_note
from conformance.goldens.store import GoldenStore, default_root
from conformance.metadata.dims import DEEPSEEK_R1
from conformance.stubs.protocol import MLAAttentionLayer

LAYER = "model.layers.0.self_attn.attn"
STORE = GoldenStore(default_root())
CASES = [GoldenCase.from_json(e.case) for e in STORE.read_manifest().entries.values()]
FP8_GOLDEN = "triton-h128-fp8-q1-p1-cu132"  # e4m3 q and cache, scales != 1, one q token
BF16Q_FP8KV_GOLDEN = "triton-h32-bf16q-fp8kv-q4-p1-cu132-tail"


def fed(impl: str, case: GoldenCase) -> bool:
    """Whether vLLM feeds `impl` this batch: its dtypes are a pair the implementation
    declares, a vLLM record expresses it (kv never shorter than q), and a non-causal batch
    only where the implementation takes one."""
    spec = IMPLEMENTATIONS[impl]
    pair = (case.q_torch_dtype, case.kv_torch_dtype)
    return case.via_builder and pair in spec.dtype_pairs and (case.causal or spec.non_causal)


GOLDENS = [(impl, case.id) for impl in IMPLEMENTATIONS for case in CASES if fed(impl, case)]
GOLDEN_IDS = [f"{impl}-{case_id}" for impl, case_id in GOLDENS]
MASKING = [(impl, *pair) for impl, spec in IMPLEMENTATIONS.items() for pair in spec.dtype_pairs]
MASKING_IDS = [f"{impl}-{dtype_pair_id(q, kv)}" for impl, q, kv in MASKING]


def running(backends: dict[str, VllmDecodeBackend], name: str) -> VllmDecodeBackend:
    """The implementation's backend; the test is skipped, with vLLM's reason, where it
    cannot run here."""
    backend = backends[name]
    available = backend.availability()
    if not available.available:
        pytest.skip(f"vLLM {name} cannot run here: {available.reason}")
    return backend


def build_golden(backend: VllmDecodeBackend, case_id: str) -> tuple[Golden, DecodeMetadata]:
    """vLLM's builder on a golden batch (re-laid into a page size its kernel reads)."""
    golden = for_backend(load_golden(STORE, case_id), backend)
    layer = MLAAttentionLayer(dims=DEEPSEEK_R1.dims, num_heads=golden.case.heads)
    config = golden.builder_config(backend.device)
    builder = backend.make_builder(config, [LAYER], {LAYER: layer})
    meta = builder.build(golden.cam(backend.device))
    assert meta.decode is not None, f"case {case_id}: vLLM's builder made no decode metadata"
    return golden, meta.decode


def decode_golden(backend: VllmDecodeBackend, case_id: str) -> tuple[Golden, torch.Tensor, ...]:
    """vLLM's builder and decode on a golden batch."""
    golden, decode = build_golden(backend, case_id)
    out, lse = run_decode(backend, golden, decode)
    return golden, out, lse


def judge_golden(implementations, impl: str, case_id: str, part: str, record) -> None:
    """vLLM's `impl` on the golden, its output or its LSE judged."""
    backend = running(implementations, impl)
    golden, out, lse = decode_golden(backend, case_id)
    what = f"vLLM {impl} (vLLM's own metadata){relaid_note(golden)}"
    assert_result_matches(
        out=out, lse=lse, golden=golden, backend=backend, record=record, what=what, parts=(part,)
    )


@pytest.mark.parametrize(("impl", "case_id"), GOLDENS, ids=GOLDEN_IDS)
def test_output_matches_golden(implementations, impl, case_id, record_errors) -> None:
    judge_golden(implementations, impl, case_id, "out", record_errors)


@pytest.mark.parametrize(("impl", "case_id"), GOLDENS, ids=GOLDEN_IDS)
def test_lse_matches_golden(implementations, impl, case_id, record_errors) -> None:
    judge_golden(implementations, impl, case_id, "lse", record_errors)


def judge_masking(backend, impl, q_dtype, kv_dtype, part: str, record) -> None:
    failures = masking_failures(backend, q_dtype, kv_dtype, LAYER, record, parts=(part,))
    if failures:
        pytest.fail(f"vLLM {impl}, the {part} judged:\n" + "\n".join(failures))


@pytest.mark.parametrize(("impl", "q_dtype", "kv_dtype"), MASKING, ids=MASKING_IDS)
def test_masking_output(implementations, impl, q_dtype, kv_dtype, record_errors) -> None:
    backend = running(implementations, impl)
    judge_masking(backend, impl, q_dtype, kv_dtype, "out", record_errors)


@pytest.mark.parametrize(("impl", "q_dtype", "kv_dtype"), MASKING, ids=MASKING_IDS)
def test_masking_lse(implementations, impl, q_dtype, kv_dtype, record_errors) -> None:
    backend = running(implementations, impl)
    judge_masking(backend, impl, q_dtype, kv_dtype, "lse", record_errors)


def faulty(implementations, impl: str, fault: Fault, workdir: Path) -> VllmDecodeBackend:
    running(implementations, impl)
    return VllmDecodeBackend(impl, workdir, fault)


def fp8_pair(backend: VllmDecodeBackend) -> tuple[torch.dtype, torch.dtype]:
    return next(pair for pair in backend.dtype_pairs if pair[1] == E4M3)


def assert_masking_catches(
    backend: VllmDecodeBackend, pair: tuple[torch.dtype, torch.dtype], broken: str, named: str
) -> None:
    """The masking family, the output judged, fails `backend` (broken as `broken` says) on
    the dtype `pair`, every failure naming `named`."""
    __tracebackhide__ = True
    failures = masking_failures(backend, *pair, LAYER, lambda *_: None, parts=("out",))
    assert failures, f"{backend.name}: {broken} passed the masking family"
    assert all(named in failure for failure in failures), failures


@pytest.mark.negative_control
@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_k_scale_not_applied_fails_naming_the_kv_scale(implementations, impl, workdir) -> None:
    """A layer whose k-scale is left at 1.0 over an fp8 cache of scale != 1 is caught: the
    masking judge reports the output off by the kv scale."""
    backend = faulty(implementations, impl, Fault.K_SCALE_NOT_APPLIED, workdir)
    assert_masking_catches(backend, fp8_pair(backend), "a k-scale left at 1.0", "kv scale")


@pytest.mark.negative_control
@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_seq_len_off_by_one_fails_naming_the_row(implementations, impl, workdir) -> None:
    """Decode metadata whose first ``seq_lens`` entry is one too long reads a token past the
    request's end: the masking judge names request 0's rows."""
    backend = faulty(implementations, impl, Fault.SEQ_LEN_OFF_BY_ONE, workdir)
    assert_masking_catches(backend, backend.dtype_pairs[0], "seq_lens[0] off by one", "request 0")


@pytest.mark.negative_control
@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_fp8_cache_read_as_storage_bytes_fails(implementations, impl, workdir) -> None:
    """An fp8 cache handed over as vLLM's uint8 storage (its layer's view to e4m3 left out)
    is refused by the kernel or fails the golden comparison."""
    backend = faulty(implementations, impl, Fault.FP8_CACHE_AS_STORAGE, workdir)
    case_id = FP8_GOLDEN if fp8_pair(backend)[0] == E4M3 else BF16Q_FP8KV_GOLDEN
    golden, decode = build_golden(backend, case_id)  # vLLM's own path up to the decode
    with pytest.raises(Exception) as caught:  # only the decode and its judge may fail
        out, lse = run_decode(backend, golden, decode)
        assert_result_matches(
            out=out, lse=lse, golden=golden, backend=backend, record=lambda *_: None, what=impl
        )
    assert not isinstance(caught.value, pytest.skip.Exception), caught.value
    print(f"vLLM {impl}, fp8 cache as uint8: {type(caught.value).__name__}: {caught.value}"[:400])
