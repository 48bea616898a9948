"""Self-tests of the planner's input checks: one test per error, each message starting with
the argument's name."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conformance.errors import PlanError
from conformance.persistent import plan_persistent_decode

from plancall import BF16, FP8_FN, i32, plan_args

pytestmark = pytest.mark.selftest


# ---------------------------------------------------------------------------------------
# Bad input: one test per error; the message starts with the argument's name


def expect_error(argument: str, **overrides: Any) -> PlanError:
    base = {"q_lens": [1, 1], "kv_lens": [100, 50]}
    q_lens = overrides.pop("q_lens", base["q_lens"])
    kv_lens = overrides.pop("kv_lens", base["kv_lens"])
    last = overrides.pop("last", None)
    with pytest.raises(PlanError, match=rf"^{argument}: ") as info:
        plan_persistent_decode(**plan_args(q_lens, kv_lens, last, **overrides))
    return info.value


def test_error_kv_indptr_not_starting_at_zero() -> None:
    err = expect_error("kv_indptr", kv_indptr=i32([5, 105, 155]))
    assert "found 5" in str(err)


def test_error_kv_indptr_decreasing() -> None:
    err = expect_error("kv_indptr", kv_indptr=i32([0, 100, 90]))
    assert "kv_indptr[1]=100 > kv_indptr[2]=90" in str(err)


def test_error_qo_indptr_length_inconsistent() -> None:
    err = expect_error("qo_indptr", qo_indptr=i32([0, 1]))
    assert "expected length 3" in str(err)


def test_error_kv_last_page_lens_length_inconsistent() -> None:
    err = expect_error("kv_last_page_lens", kv_last_page_lens=i32([1]))
    assert "expected length 2" in str(err)


def test_error_kv_shorter_than_q_for_causal_decode() -> None:
    err = expect_error("kv_indptr", q_lens=[4, 4], kv_lens=[100, 2])
    assert "batch 1 has 2 kv tokens" in str(err)


def test_error_q_tokens_above_max_seqlen_qo() -> None:
    err = expect_error("qo_indptr", q_lens=[1, 3], max_seqlen_qo=2, uni_seqlen_qo=-1)
    assert "batch 1 has 3 q tokens" in str(err)


def test_error_num_heads_not_multiple_of_8() -> None:
    err = expect_error("num_heads_q", num_heads_q=20)
    assert "found 20" in str(err)


def test_error_heads_neither_native_nor_foldable() -> None:
    err = expect_error("num_heads_q", num_heads_q=40)  # gfx942 bf16: 40 % 16 != 0
    assert "40 heads" in str(err)


def test_error_triton_heads_not_foldable_by_64() -> None:
    err = expect_error("num_heads_q", num_heads_q=96, arch="triton")
    assert "96 heads" in str(err)


def test_error_folding_needs_uni_seqlen_qo() -> None:
    err = expect_error("uni_seqlen_qo", num_heads_q=32, uni_seqlen_qo=-1)
    assert "found -1" in str(err)


def test_error_page_size_not_power_of_two() -> None:
    err = expect_error("page_size", page_size=24)
    assert "found 24" in str(err)


def test_error_kv_granularity_not_power_of_two() -> None:
    err = expect_error("kv_granularity", kv_granularity=12)
    assert "found 12" in str(err)


def test_error_uni_seqlen_qo_inconsistent_with_qo_indptr() -> None:
    err = expect_error("uni_seqlen_qo", q_lens=[1, 2], max_seqlen_qo=2, uni_seqlen_qo=1)
    assert "qo_indptr[2]=3" in str(err)


def test_error_fp8_q_with_bf16_kv() -> None:
    err = expect_error("q_dtype", q_dtype=FP8_FN, kv_dtype=BF16)
    assert "float8_e4m3fn" in str(err)


def test_error_q_dtype_none() -> None:
    err = expect_error("q_dtype", q_dtype=None)
    assert "None" in str(err) and "46997" in str(err)


def test_error_kv_dtype_none() -> None:
    err = expect_error("kv_dtype", kv_dtype=None)
    assert "None" in str(err)


def test_error_unknown_arch_lists_known() -> None:
    err = expect_error("arch", arch="gfx90a")
    assert "gfx942" in str(err) and "gfx950" in str(err) and "triton" in str(err)


def test_error_num_cus_below_one() -> None:
    err = expect_error("num_cus", num_cus=0)
    assert "found 0" in str(err)


def test_error_max_split_per_batch_zero() -> None:
    expect_error("max_split_per_batch", max_split_per_batch=0)


def test_error_max_seqlen_qo_below_one() -> None:
    expect_error("max_seqlen_qo", max_seqlen_qo=0)


def test_error_last_page_len_outside_page() -> None:
    err = expect_error("kv_last_page_lens", page_size=16, last=[17, 4])
    assert "batch 0 has 17 tokens" in str(err)


def test_error_float_index_tensor() -> None:
    err = expect_error("qo_indptr", qo_indptr=torch.tensor([0.0, 1.0, 2.0]))
    assert "float32" in str(err)
