"""The masking contract, for every backend: no token outside a row's causal window counts.

Independent of numerics: on a crafted paged cache (`conformance.numerics.masking`) every
kv slot a query row must not see — past its causal window, past its sequence's end, in an
unused or the null block — holds a sentinel whose score would dominate the row and whose
value vector is far from every honest value. Every token a row may see scores exactly 0,
so the exact LSE is ``ln(visible tokens)`` and the exact output the mean of their values;
a single leaked token moves either by many times the derived bound, a token wrongly hidden
moves the LSE past its bound; a row whose LSE is exact but whose output is off by the kv
scale is reported as such, not as a mask fault. Each test decodes the batch at every softmax
scale the suite passes (1/√576 and DeepSeek-V3's, `conformance.numerics.softmax_scale`): the
exact result does not depend on it, a mask that hides by a finite bias does. It runs for
every q and KV dtype pair the backend declares (bf16 q over any cache, fp8 q over the same
fp8 flavour; fp8 with per-tensor scales 0.5 and 2), through the backend's own builder and
decode, in the page size its kernel reads (`Backend.page_sizes`); the harness skips the other
pairs as not applicable (`conformance.applicability`).
"""

from __future__ import annotations

import pytest
import torch

from backends.base import Backend
from conformance.applicability import dtype_pair_id
from conformance.goldens.masking_run import masking_failures

DTYPES = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# The pairs an MLA decode takes, as in the golden cases: bf16 q over any cache, fp8 q over a
# cache of the same fp8 flavour (fp8 q over a bf16 cache is no persistent MLA combination).
PAIRS = [(q, kv) for q in DTYPES for kv in DTYPES if q == torch.bfloat16 or q == kv]


@pytest.mark.parametrize(
    ("q_dtype", "kv_dtype"),
    PAIRS,
    ids=[dtype_pair_id(q, kv) for q, kv in PAIRS],
)
def test_no_token_outside_the_causal_window_reaches_the_output(
    q_dtype: torch.dtype, kv_dtype: torch.dtype, backend: Backend, layer_name: str, record_errors
) -> None:
    failures = masking_failures(backend, q_dtype, kv_dtype, layer_name, record_errors)
    if failures:
        pytest.fail("\n".join(failures))
