"""`RunRecord` writes the sidecar the sign-off has always read: the committed evidence's
sidecars, key for key and in order, and the newest byte for byte."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from conformance.runs.record import EngineRun, MachineFacts, RunRecord, SessionFacts

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[3]
EVIDENCE = sorted((REPO / "reports" / "evidence").glob("*/*.meta.json"))
MACHINE = MachineFacts("CPU", "3.11.7", "Linux", "host", {"torch": "2.9"}, None, None, "abc", False)
EVERY_KEY: dict[str, Any] = {
    "collected_ids": [], "selected_ids": [], "filtered_out": 0, "conformance_collected": True,
    "stale_expectations": [], "available": True, "availability_reason": "", "device_kind": "cpu",
    "declaration": {}, "backend_provenance": {}, "gpus": [], "pinned": {}, "junit_sha256": "0",
}  # fmt: skip
"""A value for each key a backend run's sidecar may leave out."""
ALWAYS_WRITTEN = (
    "backend", "junit", "finished", "exitstatus", "shard", "selection", "selection_reason"
)  # fmt: skip
"""The record's keys that every backend run's sidecar holds."""


def _document(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _as_written(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def recorded(document: dict[str, Any]) -> RunRecord:
    """The `RunRecord` a backend run's or an engine run's sidecar holds."""
    machine = MachineFacts(**{f.name: document.get(f.name) for f in fields(MachineFacts)})
    if document.get("kind") == "engine":
        engine = document["engine"]
        run = EngineRun(
            version=engine["version"],
            builders=engine["builders"],
            pins_replaced=engine["pins_replaced"],
            facts=document["facts"],
            counts=document["counts"],
            stood_in=engine.get("stood_in"),
            gpus=document.get("gpus"),
        )
        return RunRecord(
            **{key: document.get(key) for key in ALWAYS_WRITTEN if key != "backend"},
            backend=document["backend"],
            **{key: document.get(key) for key in ("device_kind", "junit_sha256")},
            machine=machine,
            engine=run,
        )
    session = SessionFacts(**{f.name: document.get(f.name) for f in fields(SessionFacts)})
    return RunRecord(
        **{key: document[key] for key in ALWAYS_WRITTEN},
        **{key: document.get(key) for key in ("device_kind", "junit_sha256")},
        machine=machine,
        session=session,
    )


def _newest() -> Path:
    return max(EVIDENCE, key=lambda path: path.parent.name.split("-", 3)[:3])


def test_the_committed_evidence_exists() -> None:
    assert len(EVIDENCE) >= 5, EVIDENCE


def test_the_newest_evidence_sidecar_is_written_back_byte_for_byte() -> None:
    path = _newest()
    written = _as_written(recorded(_document(path)).to_json())
    assert written == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", EVIDENCE, ids=lambda path: path.parent.name)
def test_every_committed_sidecar_s_keys_are_the_record_s_in_its_order(path: Path) -> None:
    document = _document(path)
    written = [key for key in recorded({**EVERY_KEY, **document}).to_json() if key in document]
    assert written == list(document), "a key the record does not write, or in another order"


def test_a_key_out_of_order_is_not_the_record_s_sidecar() -> None:
    document = _document(_newest())
    keys = list(document)
    keys[1], keys[2] = keys[2], keys[1]
    reordered = {key: document[key] for key in keys}
    assert _as_written(recorded(document).to_json()) != _as_written(reordered)


def test_an_engine_run_is_an_engine_sidecar() -> None:
    run = EngineRun("0.33.0", {"TRITON_MLA": "built"}, ["a==1"], "facts.json", {"tests": 1})
    record = RunRecord("vllm", "vllm.xml", MACHINE, True, 0, device_kind="cpu", engine=run)
    document = record.to_json()
    assert (document["kind"], document["engine"]["name"], document["junit_sha256"]) == (
        "engine",
        "vllm",
        None,
    )
    assert "selection_reason" not in document and "run_id" not in document
    partial = RunRecord(
        "vllm", "vllm.xml", MACHINE, True, 0, "x", "partial", "-k a", "cpu", engine=run
    ).to_json()
    assert partial["selection_reason"] == "-k a"


def test_a_record_is_of_a_session_or_an_engine_run() -> None:
    with pytest.raises(ValueError, match="expected a session or an engine run"):
        RunRecord("cpu", "cpu.xml", MACHINE, True, 0)


@pytest.mark.parametrize(
    "path",
    [path for path in EVIDENCE if _document(path).get("kind") == "engine"],
    ids=lambda path: path.parent.name,
)
def test_an_engine_run_s_sidecar_is_written_back_byte_for_byte(path: Path) -> None:
    written = _as_written(recorded(_document(path)).to_json())
    assert written == path.read_text(encoding="utf-8")
