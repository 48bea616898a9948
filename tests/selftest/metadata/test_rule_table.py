"""The validator's rule table is whole: every code has a negative control and a doc line.

A rule's negative controls are corpus entries (`conformance.metadata.corpus.CORRUPTIONS`)
that the validator rejects naming their field (test_validate_corpus.py) and that get
through, or are blamed on another field, once that rule is dropped from `RULES`.
docs/validator.md lists each code once, in the table's order, with the table's line.
"""

from __future__ import annotations

import pytest
import torch

from conformance.errors import MetadataError
from conformance.metadata import corpus
from conformance.metadata.checked import Checked
from conformance.metadata.validator import RULES, validate

from doc_lists import listed_rules

pytestmark = pytest.mark.selftest

TENSORS = (
    "_seq_lens_cpu",
    "block_table_tensor",
    "dcp_local_seq_lens",
    "dcp_local_seq_lens_cpu",
    "is_prefilling",
    "query_start_loc",
    "query_start_loc_cpu",
    "seq_lens",
    "seq_lens_cpu_upper_bound",
)

# code -> corpus entries that only that rule rejects naming their field
CONTROLS: dict[str, tuple[str, ...]] = {
    "V1": (
        "block_table_tensor-none",
        "query_start_loc-none",
        "query_start_loc_cpu-none",
        "seq_lens-none",
        "slot_mapping-none",
    ),
    "V2": ("causal-int", "max-seq-len-str", "num-actual-tokens-float"),
    **{
        code: tuple(f"{f}-{kind}" for f in TENSORS) + extra
        for code, kind, extra in (
            ("V3", "list", ("positions-list", "slot_mapping-list")),
            ("V4", "dtype", ("positions-dtype", "slot_mapping-dtype")),
            ("V5", "device", ("positions-device", "slot_mapping-device")),
            ("V7", "shape", ("table-wrong-rows",)),
        )
    },
    "V6": ("num-reqs-minus-one", "num-reqs-plus-one"),
    "V8": ("num-actual-tokens", "qsl-not-zero-based"),
    "V9": ("slot_mapping-shape",),
    "V10": ("qsl-decreasing",),
    "V11": ("qsl-device-copy-differs",),
    "V12": ("max-query-len-above", "max-query-len-below"),
    "V13": ("seq-below-query",),
    "V14": ("max-seq-len-below",),
    "V15": ("upper-bound-below-seq", "upper-bound-inexact-on-prefill", "upper-bound-missing"),
    "V16": ("decode-after-prefill",),
    "V17": ("dcp-cpu-copy-differs", "dcp-longer-than-seq"),
    "V18": ("legacy-seq-lens-differ",),
    "V19": ("positions-wrong",),
    "V20": ("padding-tail-not-pad-slot",),
    "V21": ("table-too-narrow",),
    "V22": ("block-id-negative", "block-id-past-cache"),
    "V23": ("null-block-as-context",),
    "V24": ("block-twice-in-a-request",),
    "V25": (
        "slot-in-another-requests-block",
        "slot-off-by-one",
        "slot-past-cache",
        "two-tokens-one-slot",
    ),
    "V26": ("write-into-another-requests-prefix", "write-into-another-requests-write-block"),
}


def _named(case: str) -> bool:
    """Whether `validate` rejects corpus entry `case` naming its field."""
    want, corrupt = corpus.CORRUPTIONS[case]
    try:
        validate(corrupt(corpus.make_record()), block_size=16, num_blocks=corpus.NUM_BLOCKS)
    except MetadataError as error:
        return corpus.names_field(error, want)
    except Exception:  # a crash is no clear error either
        return False
    return False


def test_codes_are_unique_and_numbered_in_order() -> None:
    assert [rule.code for rule in RULES] == [f"V{i}" for i in range(1, len(RULES) + 1)]


def test_every_rule_has_negative_controls_in_the_corpus() -> None:
    assert sorted(CONTROLS, key=lambda c: int(c[1:])) == [rule.code for rule in RULES]
    for code, cases in CONTROLS.items():
        assert cases and set(cases) <= set(corpus.CORRUPTIONS), (code, cases)


@pytest.mark.parametrize("code", [rule.code for rule in RULES])
def test_dropping_a_rule_lets_its_controls_through(code: str, swap_rule) -> None:
    assert all(_named(case) for case in CONTROLS[code])
    swap_rule(code, None)
    assert [case for case in CONTROLS[code] if _named(case)] == []


def test_docs_list_exactly_the_table() -> None:
    assert listed_rules("validator.md", "Rules") == [(rule.code, rule.doc) for rule in RULES]


def _offsets(*values: int) -> dict[str, torch.Tensor]:
    qsl = torch.tensor(values, dtype=torch.int32)
    return {"query_start_loc": qsl, "query_start_loc_cpu": qsl.clone()}


# The base record's offsets are [0, 1, 2, 8, 16, 16]; each case breaks them at one request.
@pytest.mark.parametrize(
    ("offsets", "row"),
    [((0, 3, 2, 8, 16, 16), 1), ((0, 1, 2, 17, 16, 16), 3), ((0, 1, 9, 8, 16, 16), 2)],
    ids=["after-the-first", "before-the-last", "middle"],
)
def test_decreasing_offsets_are_named(offsets: tuple[int, ...], row: int) -> None:
    cam = corpus.make_record().replace(**_offsets(*offsets))
    with pytest.raises(MetadataError) as info:
        validate(cam, block_size=16, num_blocks=corpus.NUM_BLOCKS)
    assert info.value.field == f"query_start_loc_cpu[{row}]", str(info.value)
    assert f"{offsets[row]} -> {offsets[row + 1]}" in str(info.value)


@pytest.mark.parametrize("offsets", [(0, 1, 0, 8, 16, 16), (0, 1, 2, 8, 16, 15)])
def test_no_rule_after_the_offsets_one_crashes_on_decreasing_offsets(offsets) -> None:
    """Each later rule, run without V10, passes or names a field: it never crashes. The
    requests before the one with a negative length are consistent, so that a rule walking
    the requests reaches it."""
    cam = corpus.make_record().replace(**_offsets(*offsets))
    checked = Checked(cam, 1, 16, corpus.NUM_BLOCKS)
    later = [rule for rule in RULES if int(rule.code[1:]) > 10]
    for rule in later:
        try:
            rule.check(checked)
        except MetadataError:
            pass
