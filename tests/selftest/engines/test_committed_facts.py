"""The committed facts of the release matrix: one file per release, each intact and listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.engines.facts import read_facts
from conformance.engines.releases import (
    FACTS_DIR,
    choose_facts,
    manifest_problems,
    measured_versions,
)
from conformance.engines.target import VLLM

COMMITTED = Path(__file__).resolve().parents[3] / FACTS_DIR


def test_every_release_of_the_matrix_has_its_facts_and_checksum() -> None:
    assert measured_versions(COMMITTED, VLLM.name) == list(VLLM.releases)
    assert len(VLLM.releases) >= 5 and list(VLLM.releases)[-1] == "0.34.0"
    assert manifest_problems(COMMITTED) == []


@pytest.mark.parametrize("release", list(VLLM.releases))
def test_each_release_s_facts_read_and_show_the_required_builders_built(release: str) -> None:
    chosen = choose_facts(COMMITTED, VLLM.name, release)
    assert chosen.path is not None, chosen.note
    facts = read_facts(str(chosen.path))
    assert facts.version == release
    for builder in VLLM.must_build:
        assert facts.builders[builder].status == "built", (release, builder)
        assert "q_lora_rank" in facts.builders[builder].required


def test_an_edited_facts_file_is_caught_by_the_manifest(tmp_path: Path) -> None:
    for path in COMMITTED.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    edited = tmp_path / "vllm-0.33.0.facts.json"
    edited.write_text(edited.read_text().replace('"0.33.0"', '"0.33.0" ', 1))
    assert manifest_problems(tmp_path) == [f"{edited}: sha256 differs from {tmp_path}/SHA256SUMS"]
