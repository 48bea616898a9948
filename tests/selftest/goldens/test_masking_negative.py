"""Negative controls of the masking contract (tests/conformance/test_masking.py) and of the
padded-row message of the numerics contract.

A plug-in-like backend written the way docs/plugins.md describes (plan-free, request by
request from the CSR lists, fp32) passes both; broken variants of it — a causal mask one
token too wide or too narrow, a sequence length read as whole pages, a mask by a finite
bias that hides at 1/√576 but not at DeepSeek-V3's scale, a dropped kv scale (named as
such, not as a mask fault), a loop over `num_decodes` instead of `num_requests` — and the
CPU reference with the same faults patched into its plan executor must fail, naming what
went wrong.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from backends import registry
from backends.base import Availability, Backend, DecodeMetadata, DecodeScales, MetadataBuilder
from backends.common import ALL_DTYPES, PlanFreeBuilder
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL
from kernels import plan_exec
from kernels.paged import csr_token_counts
from kernels.reference import attend_rows

pytestmark = pytest.mark.selftest

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
MASKING = CONFORMANCE / "test_masking.py"
NUMERICS = CONFORMANCE / "test_numerics.py"
MASKING_TEST = "test_no_token_outside_the_causal_window_reaches_the_output"
PAIRS = {"q-bf16-kv-bf16", "q-bf16-kv-e4m3fn", "q-bf16-kv-e4m3fnuz"}
PAIRS |= {"q-e4m3fn-kv-e4m3fn", "q-e4m3fnuz-kv-e4m3fnuz"}
PADDED = "tiny-triton-h16-bf16-q2-p16-cu132-padded"
UNPADDED = "tiny-gfx942-h32-bf16-q2-p64-cu304"


class CsrPluginBackend(Backend):
    """A plug-in as docs/plugins.md describes it: plan-free, every q and KV dtype, decoding
    request by request from the CSR lists in fp32 (bottom-right-aligned causal mask)."""

    name: ClassVar[str] = "csr_plugin"
    layer_protocol: ClassVar[frozenset[str]] = MLA_BUILDER_LAYER_PROTOCOL
    q_dtypes: ClassVar[tuple[torch.dtype, ...]] = ALL_DTYPES
    kv_dtypes: ClassVar[tuple[torch.dtype, ...]] = ALL_DTYPES
    mask_shift: ClassVar[int] = 0
    """Added to each row's visible token count (0: the contract's mask)."""

    def requests(self, decode: DecodeMetadata) -> int:
        """How many requests it reads from the CSR lists."""
        return decode.num_requests

    def length(self, decode: DecodeMetadata, request: int, pages: int) -> int:
        """Kv tokens of a request: whole pages but the last, then its valid tokens."""
        return (pages - 1) * decode.page_size + int(decode.kv_last_page_lens[request])

    def decode_scaled(
        self, q: torch.Tensor, kv_cache: torch.Tensor, decode: DecodeMetadata, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        page, width = decode.page_size, kv_cache.shape[-1]
        flat = kv_cache.reshape(-1, width)
        out = torch.zeros((q.shape[0], q.shape[1], 512))
        lse = torch.full(q.shape[:2], float("-inf"))
        qsl = decode.query_start_loc_cpu.tolist()
        for r in range(self.requests(decode)):
            lo, hi = int(decode.kv_indptr[r]), int(decode.kv_indptr[r + 1])
            q0, q1 = qsl[r], qsl[r + 1]
            if hi == lo or q1 == q0:
                continue
            length = self.length(decode, r, hi - lo)
            t = torch.arange(length)
            slots = decode.kv_indices[lo:hi].to(torch.int64)[t // page] * page + t % page
            kv = flat.index_select(0, slots).float()
            n = q1 - q0
            visible = torch.full((n,), length)
            if decode.causal:
                visible = length - n + 1 + torch.arange(n) + self.mask_shift
            out[q0:q1], lse[q0:q1] = self.attend(q[q0:q1].float(), kv, visible, scales)
        return out.to(torch.bfloat16), lse

    def attend(
        self, q: torch.Tensor, kv: torch.Tensor, visible: torch.Tensor, scales: DecodeScales
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``[n, H, 576]`` over ``[L, 576]`` tokens, row r seeing the first visible[r]."""
        return attend_rows(
            q,
            kv,
            visible=visible.clamp(0, kv.shape[0]),
            scale=scales.sm_scale * scales.q_scale * scales.kv_scale,
            v_scale=scales.kv_scale,
            kv_lora_rank=512,
        )

    def builder_cls(self) -> type[MetadataBuilder]:
        return PlanFreeBuilder

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def availability(self) -> Availability:
        return Availability(True)


class MaskOneTooWide(CsrPluginBackend):
    """BROKEN: each query token sees one kv token past its causal window."""

    name: ClassVar[str] = "mask_one_too_wide"
    mask_shift: ClassVar[int] = 1


class MaskOneTooNarrow(CsrPluginBackend):
    """BROKEN: each query token misses the last kv token of its causal window."""

    name: ClassVar[str] = "mask_one_too_narrow"
    mask_shift: ClassVar[int] = -1


class ReadsWholePages(CsrPluginBackend):
    """BROKEN: ignores `kv_last_page_lens`, so a partial last page counts as full."""

    name: ClassVar[str] = "reads_whole_pages"

    def length(self, decode: DecodeMetadata, request: int, pages: int) -> int:
        return pages * decode.page_size


class MasksByFiniteBias(CsrPluginBackend):
    """BROKEN: hides tokens by adding a finite bias to their scores, sized for 1/√576.

    The crafted sentinels score 42.7 (85.3 over the e4m3 cache, kv_scale 2) at 1/√576 and
    138.48 or more at DeepSeek-V3's scale: a bias of -115 hides them at the first scale only.
    """

    name: ClassVar[str] = "masks_by_finite_bias"
    bias: ClassVar[float] = -115.0

    def attend(self, q, kv, visible, scales):
        scale = scales.sm_scale * scales.q_scale * scales.kv_scale
        scores = torch.einsum("nhd,ld->nhl", q, kv.float()) * scale
        hidden = torch.arange(kv.shape[0])[None, :] >= visible[:, None]
        scores = scores + self.bias * hidden[:, None, :]
        lse = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - lse[..., None])
        out = torch.einsum("nhl,ld->nhd", weights, kv[:, :512].float()) * scales.kv_scale
        return out, lse


class DropsKvScale(CsrPluginBackend):
    """BROKEN: decodes as if the cache's per-tensor scale were 1 (scores and output)."""

    name: ClassVar[str] = "drops_kv_scale"

    def attend(self, q, kv, visible, scales):
        return super().attend(q, kv, visible, DecodeScales(scales.sm_scale, scales.q_scale))


class LoopsOverDecodeRows(CsrPluginBackend):
    """BROKEN: reads the CSR lists for every decode row, padded rows included."""

    name: ClassVar[str] = "loops_over_decode_rows"

    def requests(self, decode: DecodeMetadata) -> int:
        return decode.num_decodes


def use_backend(monkeypatch: pytest.MonkeyPatch, backend: Backend) -> None:
    """Make `registry.get_backend(backend.name)` return `backend`."""
    real = registry.get_backend
    monkeypatch.setattr(
        registry, "get_backend", lambda name: backend if name == backend.name else real(name)
    )


def run(pytester: pytest.Pytester, backend: str, *args: str) -> pytest.RunResult:
    """The masking and numerics contracts, in-process, for `backend`."""
    paths = (str(MASKING), str(NUMERICS))
    return pytester.runpytest_inprocess(
        *paths, "-p", "no:cacheprovider", "-rf", "--backend", backend, *args
    )


def failed(result: pytest.RunResult, test: str) -> set[str]:
    """Parameter ids of the failed parametrizations of `test`."""
    pattern = re.compile(rf"^FAILED .*::{test}\[([^\]]+)\]")
    return {m.group(1) for line in result.outlines if (m := pattern.match(line))}


def test_the_plugin_as_documented_passes(pytester, monkeypatch):
    use_backend(monkeypatch, CsrPluginBackend())
    result = run(pytester, CsrPluginBackend.name, "-k", f"masking or {PADDED} or {UNPADDED}")
    result.assert_outcomes(passed=len(PAIRS) + 4)  # masking pairs; 2 tests x 2 goldens


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (MaskOneTooWide, "lse 42.6667, exact ln(18) = 2.8904 (bound ±0.0127): a leaked"),
        (MaskOneTooNarrow, "lse -inf, exact ln(1) = 0.0000 *one token hidden too many ln(0)"),
        (ReadsWholePages, "output off the mean of its visible values"),
    ],
    ids=["one-too-wide", "one-too-narrow", "whole-pages"],
)
def test_a_broken_mask_fails_the_masking_check(pytester, monkeypatch, broken, says):
    use_backend(monkeypatch, broken())
    result = run(pytester, broken.name, "-k", "masking")
    assert failed(result, MASKING_TEST) == PAIRS
    result.stdout.fnmatch_lines(
        [
            "*q bf16, kv bf16: * problem(s) in 12 query rows: the decode let a token outside*",
            f"*request * query token *{says}*",
        ],
        consecutive=False,
    )


def test_a_mask_that_hides_only_at_one_softmax_scale_fails(pytester, monkeypatch):
    use_backend(monkeypatch, MasksByFiniteBias())
    result = run(pytester, MasksByFiniteBias.name, "-k", "masking")
    assert failed(result, MASKING_TEST) == PAIRS
    result.stdout.fnmatch_lines(
        [
            "*sm_scale 0.135234 (deepseek-v3), q bf16, kv bf16: * problem(s) in 12 query rows: "
            "the decode let a token outside a row's causal window*",
            "*a leaked sentinel makes it 138.48 or more*",
        ],
        consecutive=False,
    )
    assert not [line for line in result.outlines if "(absorbed-576)" in line]


def test_a_dropped_kv_scale_is_named_not_blamed_on_the_mask(pytester, monkeypatch):
    use_backend(monkeypatch, DropsKvScale())
    result = run(pytester, DropsKvScale.name, "-k", "masking")
    assert failed(result, MASKING_TEST) == PAIRS - {"q-bf16-kv-bf16"}  # bf16: kv_scale is 1
    result.stdout.fnmatch_lines(
        [
            "*(absorbed-576), q bf16, kv e4m3fn: * problem(s) in 12 query rows: the decode "
            "weighs the right tokens but does not multiply its output by kv_scale (2) exactly "
            "once*",
            "*request * query token *while its lse is exact: the kv scale (2) was not applied "
            "to the output",
        ],
        consecutive=False,
    )
    assert not [line for line in result.outlines if "causal window" in line]


def test_a_loop_over_decode_rows_is_told_about_padded_rows(pytester, monkeypatch):
    use_backend(monkeypatch, LoopsOverDecodeRows())
    result = run(pytester, LoopsOverDecodeRows.name, "-k", f"{PADDED} or {UNPADDED}")
    assert failed(result, "test_decode_matches_golden") == {PADDED}
    assert failed(result, "test_poisoned_slots_never_reach_the_output") == {PADDED}
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            f"*case {PADDED}: the decode raised IndexError (*) at *test_masking_negative.py:*: "
            f"the batch has 4 decode rows but 2 CSR requests (rows past 2 are padding, see "
            f'docs/plugins.md, "Padded rows"); read kv_indptr*num_requests*not num_decodes'
        ]
    )


# --------------------------------------------------------------------------------------
# The CPU reference with the same faults in its plan executor


_real_attend = plan_exec.attend_rows


def attend_one_too_wide(q: torch.Tensor, kv: torch.Tensor, *, visible: torch.Tensor, **kw: Any):
    """BROKEN: each query row of a work sees one kv token more."""
    return _real_attend(q, kv, visible=(visible + 1).clamp(max=kv.shape[0]), **kw)


def whole_page_counts(kv_indptr: torch.Tensor, kv_last_page_lens: torch.Tensor, page_size: int):
    """BROKEN: every request's last page counted as full."""
    return csr_token_counts(kv_indptr, torch.full_like(kv_last_page_lens, page_size), page_size)


@pytest.mark.parametrize(
    ("name", "patched"),
    [("attend_rows", attend_one_too_wide), ("csr_token_counts", whole_page_counts)],
    ids=["one-too-wide", "whole-pages"],
)
def test_the_cpu_reference_with_a_broken_mask_fails(pytester, monkeypatch, name, patched):
    monkeypatch.setattr(plan_exec, name, patched)
    result = run(pytester, "cpu", "-k", "masking")
    assert failed(result, MASKING_TEST) == PAIRS
    result.stdout.fnmatch_lines(["*: a leaked sentinel makes it 42.67 or more, *"])
