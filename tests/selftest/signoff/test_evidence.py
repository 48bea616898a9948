"""Evidence that can go stale, that a useless run cannot become, and that no empty run shadows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conformance.signoff.engine import run_signoff
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.evidence import save_evidence
from conformance.signoff.fingerprint import behaviour_files, changed_files, fingerprint
from conformance.signoff.model import Status, Verdict

from synthetic_reports import edit_sidecar, node_ids, offline_options, write_backend, write_evidence

IDS = node_ids("metadata", 5) + node_ids("persistent", 3)
REPOSITORY = Path(__file__).resolve().parents[3]
TREE = (
    "backends/triton_backend.py",
    "kernels/triton_mla/launch.py",
    "backends/cpu.py",
    "kernels/paged.py",
)
UNAVAILABLE = "backend cuda unavailable: no CUDA device"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    """A checkout with the files that decide the cuda backend, and cpu reports."""
    for name in TREE:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}\n")
    write_backend(tmp_path / "reports" / "junit", "cpu", IDS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def sign(checkout: Path, **changes):
    settings = {
        "evidence_dir": checkout / "reports" / "evidence",
        "write": False,
        "root": checkout,
        "require": ["cpu", "cuda"],
    }
    settings.update(changes)
    return run_signoff(offline_options(checkout / "reports", **settings))


def cuda_evidence(checkout: Path, date: str = "2026-03-01") -> Path:
    write_evidence(checkout / "reports" / "evidence" / f"{date}-cuda", "cuda", IDS)
    return checkout / "reports" / "evidence" / f"{date}-cuda"


def test_fresh_evidence_passes(checkout: Path) -> None:
    cuda_evidence(checkout)
    result = sign(checkout)
    assert (result.verdict, result.backends["cuda"].status) == (Verdict.PASS, Status.PASS)


def test_evidence_made_before_a_kernel_changed_is_stale_naming_the_file(checkout: Path) -> None:
    cuda_evidence(checkout)
    (checkout / "backends/triton_backend.py").write_text("# plans for another dtype\n")
    (checkout / "backends/rocm").mkdir()
    result = sign(checkout)
    cuda = result.backends["cuda"]
    assert cuda.status == Status.STALE
    assert "is stale: changed: backends/triton_backend.py; re-make it at this commit" in cuda.reason
    assert result.verdict == Verdict.INCOMPLETE and result.verdict.exit_code == 3
    assert result.blocking == [f"cuda: required but stale: {cuda.reason}"]


def test_a_new_or_removed_behaviour_file_makes_evidence_stale(checkout: Path) -> None:
    cuda_evidence(checkout)
    (checkout / "kernels/paged.py").unlink()
    (checkout / "conformance/numerics").mkdir(parents=True)
    (checkout / "conformance/numerics/tolerances.py").write_text("ATOL = 1\n")
    reason = sign(checkout).backends["cuda"].reason
    assert (
        "removed: kernels/paged.py" in reason
        and "new: conformance/numerics/tolerances.py" in reason
    )


def test_evidence_without_hashes_is_stale(checkout: Path) -> None:
    write_backend(checkout / "reports" / "evidence" / "2026-03-01-cuda", "cuda", IDS)
    cuda = sign(checkout, write=True).backends["cuda"]
    assert cuda.status == Status.STALE
    merged = (checkout / "reports" / "conformance.xml").read_text()
    assert '<testcase name="cuda stale: evidence of 2026-03-01' in merged
    assert (
        "evidence of 2026-03-01 (commit 0123456789ab) is stale: no file hashes recorded"
        in cuda.reason
    )


def test_stale_evidence_of_an_optional_backend_does_not_block(checkout: Path) -> None:
    write_backend(checkout / "reports" / "evidence" / "2026-03-01-cuda", "cuda", IDS)
    result = sign(checkout, require=["cpu"])
    assert result.backends["cuda"].status == Status.STALE
    assert result.verdict == Verdict.PASS


def test_the_committed_cuda_evidence_predates_hashes_and_is_stale(tmp_path: Path) -> None:
    """reports/evidence/2026-11-30-cuda was made before evidence recorded file hashes."""
    evidence = REPOSITORY / "reports" / "evidence"
    result = run_signoff(
        offline_options(
            tmp_path, evidence_dir=evidence, write=False, root=REPOSITORY, require=["cuda"]
        )
    )
    cuda = result.backends["cuda"]
    if cuda.input.evidence_facts and cuda.input.evidence_facts.get("fingerprint"):
        pytest.skip("not applicable: the committed cuda evidence has been re-made with hashes")
    assert cuda.status == Status.STALE and "no file hashes recorded" in cuda.reason


def test_an_all_skipped_local_report_never_shadows_evidence(checkout: Path) -> None:
    cuda_evidence(checkout)
    write_backend(
        checkout / "reports" / "junit", "cuda", IDS, skips=dict.fromkeys(IDS, UNAVAILABLE)
    )
    result = sign(checkout)
    cuda = result.backends["cuda"]
    assert (cuda.input.source, cuda.status) == ("evidence", Status.PASS)
    assert any("every test of the local cuda.xml was skipped" in w for w in result.warnings)


def test_a_local_report_that_ran_shadows_evidence(checkout: Path) -> None:
    cuda_evidence(checkout)
    write_backend(checkout / "reports" / "junit", "cuda", IDS, outcomes={IDS[0]: "failed"})
    cuda = sign(checkout).backends["cuda"]
    assert (cuda.input.source, cuda.status) == ("local", Status.FAIL)


def test_the_fingerprint_names_the_backend_files_of_the_repository() -> None:
    names = behaviour_files("cuda", REPOSITORY)
    assert {
        "backends/triton_backend.py",
        "kernels/triton_mla/decode_kernel.py",
        "kernels/gluon_mla/decode_kernel.py",
        "kernels/triton_planner.py",
        "kernels/planner_setup.py",
        "kernels/device_plan.py",
        "tests/goldens/manifest.json",
    } <= set(names)
    assert "kernels/gluon_mla/decode_kernel.py" not in behaviour_files("interpret", REPOSITORY)
    assert "backends/cpu.py" not in names and "conformance/expectations/cuda.txt" in names
    assert changed_files(fingerprint("cuda", REPOSITORY), "cuda", REPOSITORY) == []


# --- --save-evidence refuses what is no evidence --------------------------------------------


def save(checkout: Path, backend: str = "cuda", kind: str = "cuda") -> Path:
    junit = checkout / "reports" / "junit"
    return save_evidence(
        junit, backend, checkout / "reports" / "evidence", root=checkout, expected_kind=kind
    )


def test_save_evidence_of_a_good_run_records_the_fingerprint(checkout: Path) -> None:
    write_backend(checkout / "reports" / "junit", "cuda", IDS)
    target = save(checkout)
    versions = json.loads((target / "versions.json").read_text())
    assert set(versions["fingerprint"]["files"]) == {
        "backends/triton_backend.py", "kernels/triton_mla/launch.py", "kernels/paged.py"
    }  # fmt: skip
    assert versions["device_kind"] == "cuda"


def test_save_evidence_refuses_an_all_skipped_run(checkout: Path) -> None:
    write_backend(
        checkout / "reports" / "junit", "cuda", IDS, skips=dict.fromkeys(IDS, UNAVAILABLE)
    )
    with pytest.raises(
        SignoffInputError, match=f"no cuda test passed .8 reported; first reason: {UNAVAILABLE}"
    ):
        save(checkout)
    assert not (checkout / "reports" / "evidence").exists()


def test_save_evidence_refuses_a_run_on_the_wrong_device(checkout: Path) -> None:
    junit = checkout / "reports" / "junit"
    write_backend(junit, "cuda", IDS)
    edit_sidecar(junit / "cuda.meta.json", device_kind="cpu", device="Intel(R) Xeon(R)")
    with pytest.raises(
        SignoffInputError, match="runs on a cuda device, but the run's provenance shows cpu"
    ):
        save(checkout)


def test_save_evidence_refuses_reports_of_another_commit(checkout: Path, monkeypatch) -> None:
    write_backend(checkout / "reports" / "junit", "cuda", IDS)
    monkeypatch.setenv("MLA_CONFORMANCE_GIT_COMMIT", "fedcba9876543210")
    with pytest.raises(
        SignoffInputError,
        match="made at commit 0123456789abcdef, this checkout is at fedcba9876543210",
    ):
        save(checkout)


def test_save_evidence_takes_a_run_named_by_its_short_commit(checkout: Path, monkeypatch) -> None:
    # A GPU machine's copy names its commit short (MLA_CONFORMANCE_GIT_COMMIT=0123456);
    # the checkout's git gives it whole: the same commit.
    junit = checkout / "reports" / "junit"
    write_backend(junit, "cuda", IDS)
    document = json.loads((junit / "cuda.meta.json").read_text())
    document["git_commit"] = "0123456"
    (junit / "cuda.meta.json").write_text(json.dumps(document))
    monkeypatch.setenv("MLA_CONFORMANCE_GIT_COMMIT", "0123456789abcdef")
    saved = save(checkout)
    assert (saved / "versions.json").exists()
    shutil.rmtree(saved)
    document["git_commit"] = "012345"  # too short to name a commit
    (junit / "cuda.meta.json").write_text(json.dumps(document))
    with pytest.raises(SignoffInputError, match="made at commit 012345, this checkout"):
        save(checkout)


def _local_imports(module: str) -> set[str]:
    """Repository modules `module` imports, transitively (module- and function-level)."""
    import ast

    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = REPOSITORY / (name.replace(".", "/") + ".py")
        if not path.is_file():
            path = REPOSITORY / name.replace(".", "/") / "__init__.py"
        if name in seen or not path.is_file():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
    return seen


def test_every_kernel_the_cuda_backend_imports_is_in_its_fingerprint() -> None:
    """On a GPU the cuda backend runs every kernel its module reaches (planner, decode)."""
    backend = "cuda"
    kernels = {
        (name.replace(".", "/") + ".py")
        for name in _local_imports("backends.triton_backend")
        if name.startswith("kernels.") and (REPOSITORY / (name.replace(".", "/") + ".py")).is_file()
    }
    missing = kernels - set(behaviour_files(backend, REPOSITORY))
    assert not missing, f"{backend}'s evidence would not go STALE when these change: {missing}"


def test_a_machine_record_that_contradicts_the_evidence_is_refused(checkout: Path) -> None:
    evidence = cuda_evidence(checkout)
    facts = json.loads((evidence / "versions.json").read_text())
    facts |= {"device": "NVIDIA H100 80GB HBM3", "git_commit": "0c01ba827b4fd4cf"}
    (evidence / "versions.json").write_text(json.dumps(facts))
    record = {"device": "NVIDIA H100 80GB HBM3", "git_commit": "0c01ba8"}
    (evidence / "machine.json").write_text(json.dumps(record))
    assert sign(checkout).backends["cuda"].status == Status.PASS, "a record that agrees"
    (evidence / "machine.json").write_text(json.dumps(record | {"device": "NVIDIA H200"}))
    result = sign(checkout)
    assert result.backends["cuda"].status != Status.PASS
    backend = result.backends["cuda"]
    assert "machine.json: device 'NVIDIA H200'" in f"{backend.reason} {backend.issues}"
    (evidence / "machine.json").write_text(json.dumps(record | {"git_commit": "1234567"}))
    assert sign(checkout).backends["cuda"].status != Status.PASS, "another commit passed"
