"""The measured-facts file: round trip, and one-line refusals of bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.engines.facts import FactsError, check_version, read_facts, write_facts

from engine_facts import make_facts

pytestmark = pytest.mark.selftest


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "facts.json"
    write_facts(path, make_facts())
    facts = read_facts(path)
    assert facts == make_facts()
    assert facts.builders["A"].read_set() == {"kv_lora_rank", "prefill_backend"}
    assert facts.builders_needing("seq_lens_cpu_upper_bound") == {"A": ("mixed",)}
    assert facts.builders_needing("no_such_field") == {}


def test_hand_edited_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "facts.json"
    write_facts(path, make_facts())
    data = json.loads(path.read_text())
    data["builders"]["A"]["reads"]["init"].remove("kv_lora_rank")
    path.write_text(json.dumps(data))
    with pytest.raises(FactsError, match="sha256 does not match"):
        read_facts(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not a JSON facts file"),
        ("[1, 2]", "a JSON object"),
        ('{"format": "other/2"}', "is not 'mla-conformance/engine-facts/1'"),
    ],
)
def test_malformed_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "facts.json"
    path.write_text(text)
    with pytest.raises(FactsError, match=message) as caught:
        read_facts(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_key_is_named(tmp_path: Path) -> None:
    body = make_facts().to_json()
    del body["builders"]["A"]["status"]
    body.pop("sha256")
    from conformance.engines.facts import facts_checksum

    body["sha256"] = facts_checksum(body)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(body))
    with pytest.raises(FactsError, match="malformed facts: 'status'"):
        read_facts(path)


def test_facts_of_another_release_are_refused() -> None:
    facts = make_facts("0.33.0")
    check_version(facts, engine="vllm", version="0.33.0", source="f.json")
    with pytest.raises(FactsError, match=r"measured on vllm 0\.33\.0, the tree is vllm 0\.34\.0"):
        check_version(facts, engine="vllm", version="0.34.0", source="f.json")
    with pytest.raises(FactsError, match="facts of engine 'vllm'"):
        check_version(facts, engine="sglang", version=None, source="f.json")
