"""Provenance the sign-off shows: a dirty working tree and a GPU run that names no GPU warn."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from conformance.runs import provenance
from conformance.runs.names import sidecar_path
from conformance.signoff.engine import run_signoff
from conformance.signoff.evidence import VERSIONS_FILE
from conformance.signoff.model import Verdict

from synthetic_reports import edit_sidecar, node_ids, offline_options, write_backend, write_evidence

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[3]
IDS = node_ids("metadata", 6) + node_ids("stubs", 4)


def _all_outputs(reports: Path) -> dict[str, str]:
    return {name: (reports / name).read_text() for name in ("signoff.md", "signoff.html")} | {
        "signoff.json": json.dumps(json.loads((reports / "signoff.json").read_text()))
    }


@pytest.mark.parametrize("dirty", [True, False, None])
def test_a_run_from_a_dirty_tree_is_a_warning_on_every_output(tmp_path: Path, dirty) -> None:
    reports = tmp_path / "reports"
    (junit,) = write_backend(reports / "junit", "cpu", IDS)
    edit_sidecar(sidecar_path(junit), git_dirty=dirty)
    result = run_signoff(offline_options(reports))
    assert result.verdict == Verdict.PASS, "a dirty tree warns, it does not block"
    warned = [w for w in result.backends["cpu"].warnings if "uncommitted changes" in w]
    assert bool(warned) == (dirty is True), result.backends["cpu"].warnings
    for name, text in _all_outputs(reports).items():
        assert ("uncommitted changes" in text) == (dirty is True), name


@pytest.mark.parametrize("dirty", [True, False])
def test_evidence_made_from_a_dirty_tree_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dirty: bool
) -> None:
    monkeypatch.chdir(REPO)  # the fingerprint is of this checkout
    reports = tmp_path / "reports"
    evidence = reports / "evidence" / "2026-01-02-cuda"
    write_evidence(evidence, "cuda", IDS)
    versions = json.loads((evidence / VERSIONS_FILE).read_text())
    versions["fingerprint"]["dirty"] = dirty
    (evidence / VERSIONS_FILE).write_text(json.dumps(versions))
    for junit in evidence.glob("*.xml"):
        edit_sidecar(sidecar_path(junit), gpus=["Synthetic GPU"])
    result = run_signoff(
        offline_options(reports, evidence_dir=reports / "evidence", root=REPO, require=["cuda"])
    )
    warnings = result.backends["cuda"].warnings
    assert any("was made from a working tree with uncommitted" in w for w in warnings) == dirty
    document = json.loads((reports / "signoff.json").read_text())
    (cuda,) = [b for b in document["backends"] if b["backend"] == "cuda"]
    assert cuda["evidence"]["dirty"] is dirty
    assert ("(uncommitted changes)" in (reports / "signoff.html").read_text()) == dirty


@pytest.mark.parametrize(
    ("kind", "gpus", "warned"),
    [
        ("cuda", None, True),
        ("cuda", [], True),
        ("cuda", ["NVIDIA H200"], False),
        ("cpu", [], False),
    ],
)
def test_a_gpu_run_that_names_no_gpu_is_a_warning(
    tmp_path: Path, kind: str, gpus: list[str] | None, warned: bool
) -> None:
    reports = tmp_path / "reports"
    backend = "cuda" if kind == "cuda" else "cpu"
    (junit,) = write_backend(reports / "junit", backend, IDS)
    edit_sidecar(sidecar_path(junit), device="Intel(R) Xeon(R) Processor", gpus=gpus)
    result = run_signoff(offline_options(reports, runnable=[backend], write=False))
    found = [w for w in result.backends[backend].warnings if "names no GPU" in w]
    assert bool(found) == warned, result.backends[backend].warnings
    if warned:
        assert "Intel(R) Xeon(R) Processor" in found[0] and junit.name in found[0]


def test_the_committed_evidence_shows_its_dirty_tree(tmp_path: Path) -> None:
    """Every committed evidence set the sign-off reads (the newest of each backend) that
    recorded a dirty tree is warned about by name."""
    evidence = REPO / "reports" / "evidence"
    newest = {path.name.split("-", 3)[3]: path for path in sorted(evidence.iterdir())}
    dirty = [
        path.name
        for path in newest.values()
        if json.loads((path / VERSIONS_FILE).read_text()).get("fingerprint", {}).get("dirty")
    ]
    if not dirty:
        pytest.skip("not applicable: no committed evidence set records a dirty tree")
    reports = tmp_path / "reports"
    reports.mkdir()
    result = run_signoff(offline_options(reports, evidence_dir=evidence, root=REPO, write=False))
    warnings = [w for b in result.backends.values() for w in b.warnings]
    for name in dirty:
        assert any(name in w and "uncommitted changes" in w for w in warnings), (name, warnings)


def test_a_run_records_every_gpu_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["NVIDIA H200", "NVIDIA H100"]
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: len(names),
        get_device_name=lambda index: names[index],
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert provenance.gpu_names() == names
    cuda.is_available = lambda: False
    assert provenance.gpu_names() == []


def test_a_single_process_run_names_its_device() -> None:
    assert provenance.run_devices([], "NVIDIA H200") == ["NVIDIA H200"]
    assert provenance.run_devices(["GPU-1", "GPU-0", "GPU-1"], "x") == ["GPU-0", "GPU-1"]
    assert provenance.run_devices([], None) == []
