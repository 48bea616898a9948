"""`validate` itself: its messages, its arguments, what it leaves unchecked without paging
facts, and negative controls proving the corpus catches a validator that drops a rule.

The malformed-record corpus runs in test_validate_corpus.py.
"""

from __future__ import annotations

import pytest
import torch

from conformance.errors import MetadataError
from conformance.metadata import batch, corpus, paging
from conformance.metadata.checked import same_device
from conformance.metadata.validator import validate


def _cam():
    return batch.make_cam(batch.BATCH_SPECS["mixed_small"], block_size=16)


def test_error_message_prints_expected_and_found():
    cam = _cam().replace(max_seq_len=10)
    with pytest.raises(MetadataError) as exc:
        validate(cam)
    assert str(exc.value) == "max_seq_len: expected >= longest sequence (56), found 10"


def test_max_query_len_is_exact():
    with pytest.raises(MetadataError, match=r"max_query_len: expected the longest query \(5\)"):
        validate(_cam().replace(max_query_len=6))


def test_device_without_an_index_matches_any_index():
    assert same_device(torch.device("cuda", 1), torch.device("cuda"))
    assert not same_device(torch.device("cuda", 1), torch.device("cuda", 0))
    assert not same_device(torch.device("cpu"), torch.device("cuda"))


def test_a_device_argument_names_the_misplaced_tensors():
    with pytest.raises(MetadataError, match="query_start_loc: expected device meta, found cpu"):
        validate(_cam(), device="meta")


@pytest.mark.parametrize(("name", "value"), [("block_size", 0), ("num_blocks", 0)])
def test_bad_paging_facts_are_a_usage_error(name, value):
    facts = {"block_size": 16, name: value}
    with pytest.raises(ValueError, match=f"{name}: expected an int >= 1"):
        validate(_cam(), **facts)


def test_without_paging_facts_the_paging_rules_are_off():
    """What the docstring says `validate` cannot check without `block_size`."""
    narrow = _cam().replace(block_table_tensor=_cam().block_table_tensor[:, :1].clone())
    validate(narrow)
    with pytest.raises(MetadataError, match=r"block_table_tensor\[0\]"):
        validate(narrow, block_size=16)


def test_names_field_requires_the_index_where_one_is_named():
    error = MetadataError("slot_mapping[3]", "x", 1)
    assert corpus.names_field(error, "slot_mapping")
    assert corpus.names_field(error, "slot_mapping[3]")
    assert not corpus.names_field(error, "slot_mapping[4]")
    assert not corpus.names_field(error, "positions")


def _accepted_or_misnamed(names: list[str]) -> list[str]:
    """Corpus entries among `names` that `validate` does not reject naming their field."""
    missed = []
    for name in names:
        want, corrupt = corpus.CORRUPTIONS[name]
        try:
            validate(corrupt(corpus.make_record()), block_size=16, num_blocks=corpus.NUM_BLOCKS)
        except MetadataError as error:
            if corpus.names_field(error, want):
                continue
        except Exception:  # a leak (AttributeError, NotImplementedError, ...) is a miss too
            pass
        missed.append(name)
    return missed


def test_corpus_catches_a_validator_without_block_ownership(swap_rule):
    swap_rule("V26", None)
    names = ["write-into-another-requests-write-block", "write-into-another-requests-prefix"]
    assert _accepted_or_misnamed(names) == names


def test_corpus_catches_a_validator_blaming_the_tensors_for_num_reqs(swap_rule):
    swap_rule("V6", None)
    names = ["num-reqs-plus-one", "num-reqs-minus-one"]
    assert _accepted_or_misnamed(names) == names


def test_corpus_catches_a_validator_accepting_the_null_block(monkeypatch):
    monkeypatch.setattr(paging, "NULL_BLOCK", -99)
    assert _accepted_or_misnamed(["null-block-as-context"]) == ["null-block-as-context"]


def test_corpus_catches_a_validator_without_the_tensor_checks(swap_rule):
    swap_rule("V4", None)
    swap_rule("V5", None)
    names = [n for n in corpus.CORRUPTIONS if n.endswith(("-dtype", "-device"))]
    assert _accepted_or_misnamed(names) == names
