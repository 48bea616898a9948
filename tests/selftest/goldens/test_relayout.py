"""A golden re-laid in another page size holds the same kv tokens in the same order.

`conformance.goldens.relayout` serves backends whose kernel reads one page size (FlashMLA:
64). Its result must be the same batch: every request's tokens, gathered through the new
block table, equal the golden's kv tokens; pages are distinct, shuffled, never the null block;
every other slot is poisoned; the CAM it gives passes the validator in the new page size.
"""

from __future__ import annotations

import pytest
import torch

from conformance.goldens import GoldenStore, load_golden
from conformance.goldens.relayout import RELAID_FROM, for_backend, relaid, relaid_note
from conformance.metadata.validator import validate

pytestmark = pytest.mark.selftest

CASES = ("tiny-triton-h16-bf16-q2-p16-cu132-padded", "gfx942-h16-bf16-q1-p1-cu304-msb1")


def _gathered(golden) -> torch.Tensor:
    cache = golden.kv_cache("cpu").reshape(-1, 576)
    page = golden.case.page_size
    rows = []
    for r, n in enumerate(golden["seq_lens"].tolist()):
        positions = torch.arange(n)
        slots = golden["block_table"][r, positions // page].long() * page + positions % page
        rows.append(cache[slots])
    return torch.cat(rows)


@pytest.mark.parametrize("case_id", CASES)
@pytest.mark.parametrize("page_size", [64, 32])
def test_the_same_tokens_in_the_same_order(case_id: str, page_size: int) -> None:
    golden = load_golden(GoldenStore(), case_id)
    new = relaid(golden, page_size)
    assert new.case.page_size == page_size and new.meta[RELAID_FROM] == golden.case.page_size
    assert torch.equal(_gathered(new).float(), golden["kv_tokens"].float())
    ids = new["kv_indices"]
    assert len(set(ids.tolist())) == ids.numel() and int(ids.min()) >= 1
    assert int(ids.max()) < new.num_blocks
    poisoned = int(torch.isnan(new.kv_cache("cpu").float()).any(-1).sum())
    assert poisoned == new.poisoned_slots > 0
    cam = new.cam("cpu")
    validate(cam, block_size=page_size, num_blocks=new.num_blocks)
    assert relaid_note(new) == f" (re-laid from {golden.case.page_size}-token pages)"


def test_pages_are_shuffled_not_laid_in_order() -> None:
    new = relaid(load_golden(GoldenStore(), CASES[1]), 1)  # page 1: one page per token
    ids = new["kv_indices"].tolist()
    assert ids != sorted(ids)


class _Declared:
    def __init__(self, page_sizes, plan_format=None) -> None:
        self.page_sizes, self.plan_format = page_sizes, plan_format


def test_only_a_plan_free_backend_that_declares_other_pages_is_relaid() -> None:
    golden = load_golden(GoldenStore(), CASES[0])  # page 16
    assert for_backend(golden, _Declared(None)) is golden
    assert for_backend(golden, _Declared((16, 64))) is golden
    assert for_backend(golden, _Declared((64,), plan_format="aiter-v1")) is golden
    assert for_backend(golden, _Declared((64,))).case.page_size == 64


def test_a_page_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="page_size: expected an int >= 1, found 0"):
        relaid(load_golden(GoldenStore(), CASES[0]), 0)
