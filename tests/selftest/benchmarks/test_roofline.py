"""Self-tests of the decode roofline arithmetic (benchmarks/roofline.py), CPU only."""

from __future__ import annotations

import math

import pytest

from benchmarks.roofline import Ceilings, DecodeShape, achieved, floor

# An H200's measured ceilings: 4.3 TB/s device copy, 790 TFLOP/s bf16 matmul.
ANCHOR = Ceilings(copy_bytes_per_s=4.3e12, matmul_flops_per_s=790e12)


def test_flops_and_kv_bytes_match_the_formulas() -> None:
    shape = DecodeShape(batch=128, heads=128, context=8192, q_len=1, kv_format="bf16")
    assert shape.flops == 2176 * 128 * 1 * 128 * 8192
    assert shape.kv_bytes == 128 * 8192 * 1152
    fp8 = DecodeShape(batch=128, heads=128, context=8192, q_len=1, kv_format="fp8")
    assert fp8.kv_bytes * 2 == shape.kv_bytes
    assert fp8.flops == shape.flops


def test_min_bytes_adds_q_out_and_lse_once() -> None:
    shape = DecodeShape(batch=2, heads=16, context=100, q_len=2, kv_format="fp8", q_format="fp8")
    rows = 2 * 2 * 16
    assert shape.min_bytes == 2 * 100 * 576 + rows * 576 * 1 + rows * 512 * 2 + rows * 4


@pytest.mark.parametrize(
    ("heads", "kv_format", "context", "bound", "floor_us"),
    [
        # Worked by hand from the counts in benchmarks/roofline.py: h=128, B=128, L=8k bf16 is
        # compute-bound at ≈370 µs (2176·128·128·8192 FLOPs at 790 TFLOP/s); h=16 bf16, B=128,
        # L=16k memory-bound at ≈563 µs (1152 B per token at 4.3 TB/s).
        (128, "bf16", 8192, "compute", 370),
        (16, "bf16", 16384, "memory", 563),
        (16, "bf16", 4096, "memory", 141),
    ],
)
def test_floor_reproduces_the_hand_worked_floors(
    heads: int, kv_format: str, context: int, bound: str, floor_us: float
) -> None:
    shape = DecodeShape(batch=128, heads=heads, context=context, q_len=1, kv_format=kv_format)
    f = floor(shape, ANCHOR)
    assert f.bound == bound
    assert math.isclose(f.seconds * 1e6, floor_us, rel_tol=0.02), f.seconds * 1e6


def test_fp8_halves_the_memory_floor_of_a_memory_bound_case() -> None:
    bf16 = DecodeShape(batch=128, heads=16, context=16384, q_len=1, kv_format="bf16")
    fp8 = DecodeShape(batch=128, heads=16, context=16384, q_len=1, kv_format="fp8")
    ratio = floor(fp8, ANCHOR).memory_s / floor(bf16, ANCHOR).memory_s
    assert 0.49 < ratio < 0.51


def test_achieved_fractions_are_floor_over_time() -> None:
    shape = DecodeShape(batch=128, heads=128, context=8192, q_len=1, kv_format="bf16")
    f = floor(shape, ANCHOR)
    got = achieved(shape, ANCHOR, 2 * f.seconds)
    assert got["fraction_of_floor"] == pytest.approx(0.5)
    assert got["tflops"] == pytest.approx(shape.flops / (2 * f.seconds) / 1e12)
    assert got["fraction_of_compute_floor"] == pytest.approx(0.5)
    assert got["fraction_of_memory_floor"] < 0.5  # compute-bound: the memory term is smaller


def test_bad_inputs_are_rejected_with_the_field_named() -> None:
    with pytest.raises(ValueError, match=r"DecodeShape\.kv_format"):
        DecodeShape(batch=1, heads=16, context=1, q_len=1, kv_format="int4")
    with pytest.raises(ValueError, match=r"DecodeShape\.batch"):
        DecodeShape(batch=0, heads=16, context=1, q_len=1, kv_format="bf16")
    shape = DecodeShape(batch=1, heads=16, context=1, q_len=1, kv_format="bf16")
    with pytest.raises(ValueError, match="seconds"):
        achieved(shape, ANCHOR, 0.0)
    with pytest.raises(ValueError, match="ceilings"):
        floor(shape, Ceilings(copy_bytes_per_s=0.0, matmul_flops_per_s=1.0))
