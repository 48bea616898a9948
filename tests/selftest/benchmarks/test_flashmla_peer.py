"""Self-tests of the benchmark's FlashMLA peer against the CPU stand-in of FlashMLA's ops.

The stand-in (tests/selftest/support/fake_flashmla.py, shared with the backend's tests) has
FlashMLA's positional signatures, shapes and LSE layout. The peer's output, turned into the
suite's layout, passes the benchmark's output check on bf16 and e4m3 cases; a peer that drops
the e4m3 descales or keeps FlashMLA's LSE layout is marked wrong.
"""

from __future__ import annotations

import pytest

from benchmarks.decode import flashmla_peer as fp
from benchmarks.decode.cases import Case
from benchmarks.decode.inputs import make_batch, reference_rows
from benchmarks.decode.record import errors, wrong_reason

import fake_flashmla as fake


def _checked(case: Case, peer: fp.FlashMLAPeer) -> str | None:
    batch = make_batch(case, "cpu")
    rows, ref_out, ref_lse = reference_rows(batch, [0, case.batch - 1])
    impl = peer.impl(batch)
    out, lse = impl.outputs(impl.run())
    assert impl.info == {"flashmla": "stand-in"}
    assert out.shape == (case.batch * case.q_len, case.heads, 512)
    return wrong_reason(errors(out, lse, rows, ref_out, ref_lse), float(ref_out.abs().max()))


@pytest.mark.parametrize(("kv_format", "q_len"), [("bf16", 1), ("bf16", 2), ("fp8", 2)])
def test_a_right_peer_passes_the_output_check(kv_format: str, q_len: int) -> None:
    fake.CALLS.clear()
    assert (
        _checked(Case(16, kv_format, 2, 130, q_len), fp.FlashMLAPeer(fake.ops(), "stand-in"))
        is None
    )
    kinds = [name for name, _ in fake.CALLS]
    assert kinds == (["fp8_metadata", "fp8"] if kv_format == "fp8" else ["dense", "dense"])


def test_load_says_why_without_flashmla(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.flashmla import ops

    monkeypatch.setattr(ops, "find_ops", lambda: ops.NotFound("FlashMLA not found: here"))
    assert fp.load() == (None, "FlashMLA not found: here")


class DropsDescales(fp.FlashMLAPeer):
    def impl(self, batch):
        batch.q_scale = batch.kv_scale = 1.0
        return super().impl(batch)


def test_a_peer_without_descales_is_marked_wrong() -> None:
    assert _checked(Case(16, "fp8", 2, 130, 1), DropsDescales(fake.ops(), "stand-in")) is not None


def _lse_error(batch, outputs) -> float:
    rows, ref_out, ref_lse = reference_rows(batch, [0, 1])
    impl = fp.FlashMLAPeer(fake.ops(), "stand-in").impl(batch)
    out, lse = outputs(impl.run())
    return errors(out, lse, rows, ref_out, ref_lse)["max_lse_err"]


def test_flashmla_s_lse_layout_is_converted() -> None:
    batch = make_batch(Case(16, "bf16", 2, 130, 2), "cpu")
    kept = lambda r: (r[0].reshape(-1, r[0].shape[2], 512), r[1].reshape(-1, r[1].shape[1]))  # noqa: E731
    assert _lse_error(batch, fp._suite_layout) < 1e-4
    assert _lse_error(batch, kept) > 1e-2
