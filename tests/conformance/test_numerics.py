"""The numerics contract, for every backend: its own builder and decode against goldens.

Each golden (tests/goldens, `conformance.goldens`) holds a DeepSeek-R1 decode batch and
the reference output and LSE. For the selected backend, on every case whose q and KV
dtypes it declares (`Backend.q_dtypes`, `kv_dtypes`; the harness skips the other cases as
not applicable, `conformance.applicability`):

- its builder builds its own metadata from the golden's `CommonAttentionMetadata`
  (padded rows included) and its decode runs over the NaN-poisoned paged cache; output
  and LSE match the golden within the tolerance derived for its declared numerics
  (`conformance.goldens.tolerance`); errors are recorded as JUnit properties;
- NaN-poisoned cache slots past each sequence never reach the output;
- a builder or decode that reads the CSR lists of a batch with padded rows past their end
  fails naming the padded rows (`DecodeMetadata.num_requests`, docs/plugins.md);
- the golden files are intact (sha256 against the manifest).

A batch no CAM expresses (kv shorter than q) is fed as the golden's CSR lists; a backend
declaring the AITER v1 plan format builds with the golden's profile where it plans it, is
fed the golden plan where it only executes it, and builds with its own profile otherwise
(`conformance.goldens.assertions.numerics_metadata`). A plan-free backend whose kernel reads
one page size only (`Backend.page_sizes`) gets each batch re-laid in that page size
(`conformance.goldens.relayout`). Test bodies never name a backend.
"""

from __future__ import annotations

import pytest
import torch

from backends.base import Backend
from conformance.applicability import lse_compared
from conformance.goldens import GoldenStore
from conformance.goldens.assertions import numerics_metadata, run_decode
from conformance.goldens.relayout import for_backend, relaid_note


def test_goldens_are_intact(golden_store: GoldenStore) -> None:
    problems = golden_store.verify()
    assert not problems, "golden files fail verification:\n" + "\n".join(f"  {p}" for p in problems)


def test_decode_matches_golden(
    golden_id: str, backend: Backend, goldens, golden_builder, assert_decode_matches
) -> None:
    golden = for_backend(goldens(golden_id), backend)
    decode, what = numerics_metadata(backend, golden, golden_builder)
    assert_decode_matches(golden, decode, what + relaid_note(golden))


def test_poisoned_slots_never_reach_the_output(
    golden_id: str, backend: Backend, goldens, golden_builder
) -> None:
    golden = for_backend(goldens(golden_id), backend)
    case = golden.case
    cache = golden.kv_cache("cpu")
    poisoned = int(torch.isnan(cache.float()).any(dim=-1).sum())
    assert poisoned == golden.poisoned_slots > 0, (
        f"case {case.id}: expected {golden.poisoned_slots} NaN-poisoned cache slots, "
        f"found {poisoned}"
    )
    decode, _ = numerics_metadata(backend, golden, golden_builder)
    out, lse = run_decode(backend, golden, decode)
    checked = [("output", out)] + ([("lse", lse)] if lse_compared(lse, f"case {case.id}") else [])
    for name, value in checked:
        nan = torch.isnan(value.float().cpu())
        if bool(nan.any()):
            token, head = (int(i) for i in torch.nonzero(nan)[0][:2])
            pytest.fail(
                f"case {case.id}: the {name} has {int(nan.sum())} NaN entries, first at "
                f"token {token}, head {head}: the decode read a NaN-poisoned cache slot "
                f"(past a sequence's end, or an unused block)"
            )
