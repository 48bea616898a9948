"""The CI matrix built from `nox --json -l`, and the workflow that relies on it."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.ci import matrix as ci_matrix
from conformance.ci.matrix import MatrixError, build_matrix, parse_shard_counts
from conformance.targets import BUILTIN_TARGETS, DEVICE_KINDS

WORKFLOW = Path(__file__).resolve().parents[3] / ".github" / "workflows" / "conformance.yml"

# `nox --json -l -t cpu gpu` on this repository's noxfile (nox 2026.10.20), plus a
# parametrized session as a third-party backend would add one.
NOX_LISTING = [
    {"session": "cpu", "name": "cpu", "description": "CPU", "python": None,
     "tags": ["cpu"], "call_spec": {}},
    {"session": "interpret", "name": "interpret", "description": "Triton interpreter",
     "python": None, "tags": ["cpu"], "call_spec": {}},
    {"session": "cuda", "name": "cuda", "description": "CUDA", "python": None,
     "tags": ["gpu", "cuda"], "call_spec": {}},
    {"session": "rocm", "name": "rocm", "description": "ROCm", "python": None,
     "tags": ["gpu", "rocm"], "call_spec": {}},
    {"session": "conformance(flashmla)", "name": "conformance", "description": "3rd party",
     "python": None, "tags": ["gpu", "cuda"], "call_spec": {"backend": "flashmla"}},
    {"session": "signoff", "name": "signoff", "description": "sign-off", "python": None,
     "tags": [], "call_spec": {}},
]  # fmt: skip


def jobs(shards: str = "cuda=4,rocm=2") -> list[dict]:
    return build_matrix(NOX_LISTING, parse_shard_counts(shards))["include"]


def test_one_job_per_backend_and_shard() -> None:
    names = [job["name"] for job in jobs()]
    assert names == [
        "cpu",
        "interpret",
        "cuda 1/4",
        "cuda 2/4",
        "cuda 3/4",
        "cuda 4/4",
        "rocm 1/2",
        "rocm 2/2",
        "flashmla",
    ]


def test_jobs_run_on_the_right_runners() -> None:
    runners = {job["backend"]: job["runs_on"] for job in jobs()}
    assert runners == {
        "cpu": "ubuntu-latest",
        "interpret": "ubuntu-latest",
        "cuda": ["self-hosted", "nvidia"],
        "rocm": ["self-hosted", "amd"],
        "flashmla": ["self-hosted", "nvidia"],
    }


def test_shard_jobs_pass_the_shard_and_name_their_artifacts() -> None:
    cuda = [job for job in jobs() if job["backend"] == "cuda"]
    assert [job["posargs"] for job in cuda] == [f"--shard {i}/4" for i in range(1, 5)]
    assert [job["junit"] for job in cuda] == [f"cuda-shard-{i}-of-4.xml" for i in range(1, 5)]
    artifacts = [job["artifact"] for job in jobs()]
    assert len(set(artifacts)) == len(artifacts), "every job uploads under its own name"
    assert all(name.startswith("junit-") for name in artifacts)
    (cpu,) = [job for job in jobs() if job["backend"] == "cpu"]
    assert (cpu["posargs"], cpu["shard"], cpu["junit"]) == ("", "", "cpu.xml")


def test_parametrized_sessions_keep_their_session_name() -> None:
    (job,) = [job for job in jobs() if job["backend"] == "flashmla"]
    assert job["session"] == "conformance(flashmla)"


def test_untagged_sessions_are_left_out() -> None:
    assert "signoff" not in {job["session"] for job in jobs()}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("cuda", "not BACKEND=N"), ("cuda=x", "not BACKEND=N"), ("cuda=0", "at least 1")],
)
def test_bad_shard_counts_are_rejected(text: str, fragment: str) -> None:
    with pytest.raises(MatrixError, match=fragment):
        parse_shard_counts(text)


def test_shards_for_a_backend_nox_does_not_list_are_rejected() -> None:
    with pytest.raises(MatrixError, match=r"names \['metal'\]"):
        build_matrix(NOX_LISTING, {"metal": 2})


@pytest.mark.parametrize(
    ("listing", "fragment"),
    [
        ({"session": "cpu"}, "not a JSON list"),
        ([{"name": "cpu"}], "has no 'session' string"),
        ([{"session": "cpu", "tags": "cpu"}], "'tags' is not a list"),
        ([{"session": "lint", "tags": []}], "no backend session"),
    ],
)
def test_bad_listings_are_rejected(listing: object, fragment: str) -> None:
    with pytest.raises(MatrixError, match=fragment):
        build_matrix(listing, {})


def test_command_line_reads_stdin_and_prints_compact_json(monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(NOX_LISTING)))
    assert ci_matrix.main(["--shards", "cuda=2"]) == 0
    out = capsys.readouterr().out
    assert "\n" not in out.strip(), "one line, for $GITHUB_OUTPUT"
    assert [job["name"] for job in json.loads(out)["include"]][2:4] == ["cuda 1/2", "cuda 2/2"]
    monkeypatch.setattr("sys.stdin", io.StringIO("not json"))
    assert ci_matrix.main([]) == 2
    assert "conformance.ci.matrix:" in capsys.readouterr().err


# --- the workflow contract (it cannot run here, so its text is checked) -----------------------


@pytest.fixture(scope="module")
def workflow() -> str:
    return WORKFLOW.read_text(encoding="utf-8")


def test_workflow_builds_its_matrix_from_nox(workflow: str) -> None:
    assert "nox --json -l -t cpu gpu" in workflow
    assert 'python -m conformance.ci.matrix --shards "$SHARDS"' in workflow
    assert "matrix: ${{ fromJson(needs.plan.outputs.matrix) }}" in workflow
    shards = re.search(r"^  SHARDS: (\S+)$", workflow, re.MULTILINE)
    assert shards is not None
    parse_shard_counts(shards.group(1))  # a value the generator accepts


def test_workflow_jobs_run_each_shard_and_upload_its_reports(workflow: str) -> None:
    assert "runs-on: ${{ matrix.runs_on }}" in workflow
    assert 'nox -s "${{ matrix.session }}" -- ${{ matrix.posargs }}' in workflow
    assert "name: ${{ matrix.artifact }}" in workflow
    assert "path: reports/junit/" in workflow
    assert "fail-fast: false" in workflow


def test_workflow_ends_with_a_release_sign_off_of_every_artifact(workflow: str) -> None:
    signoff = workflow[workflow.index("\n  signoff:") :]
    assert "needs: conformance" in signoff
    assert "if: ${{ always() }}" in signoff, "a failed shard must still be signed off"
    assert "pattern: junit-*" in signoff and "merge-multiple: true" in signoff
    assert "nox -s signoff -- --release" in signoff


def test_workflow_never_hides_a_failure(workflow: str) -> None:
    assert "|| true" not in workflow
    assert "continue-on-error" not in workflow


def test_workflow_is_plain_yaml_without_tabs(workflow: str) -> None:
    assert "\t" not in workflow
    top_level = re.findall(r"^([a-z_-]+):", workflow, re.MULTILINE)
    assert top_level == ["name", "on", "permissions", "env", "jobs"]
    jobs_found = re.findall(r"^  ([a-z_-]+):$", workflow[workflow.index("\njobs:") :], re.MULTILINE)
    assert jobs_found == ["plan", "conformance", "engine-releases", "signoff"]


RELEASES = [
    {"session": "cpu", "name": "cpu", "tags": ["cpu"]},
    {
        "session": "vllm_release(release='0.30.0')",
        "name": "vllm_release",
        "tags": ["engine-release"],
        "call_spec": {"release": "0.30.0"},
    },
    {
        "session": "vllm_release(release='0.34.0')",
        "name": "vllm_release",
        "tags": ["engine-release"],
        "call_spec": {"release": "0.34.0"},
    },
]


def test_the_release_matrix_has_one_job_per_release() -> None:
    jobs = ci_matrix.release_matrix(RELEASES)["include"]
    assert [(j["name"], j["session"], j["artifact"]) for j in jobs] == [
        ("vllm 0.30.0", "vllm_release(release='0.30.0')", "engine-facts-vllm-0.30.0"),
        ("vllm 0.34.0", "vllm_release(release='0.34.0')", "engine-facts-vllm-0.34.0"),
    ]
    with pytest.raises(MatrixError, match="no session tagged engine-release"):
        ci_matrix.release_matrix(RELEASES[:1])


def test_the_noxfile_s_release_sessions_are_the_target_s_releases() -> None:
    from conformance.engines.target import VLLM

    pytest.importorskip("nox")
    command = [sys.executable, "-m", "nox", "-f", str(WORKFLOW.parents[2] / "noxfile.py")]
    result = subprocess.run(
        [*command, "--json", "-l", "-t", "engine-release"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    jobs = ci_matrix.release_matrix(json.loads(result.stdout))["include"]
    assert [job["release"] for job in jobs] == list(VLLM.releases)
    assert len(VLLM.releases) >= 5 and all(VLLM.supports(r) is None for r in VLLM.releases)


def _nox_listing() -> list[dict]:
    """``nox --json -l -t cpu gpu`` on this repository's noxfile (lists; makes nothing)."""
    pytest.importorskip("nox")
    command = [sys.executable, "-m", "nox", "-f", str(WORKFLOW.parents[2] / "noxfile.py")]
    result = subprocess.run(
        [*command, "--json", "-l", "-t", "cpu", "gpu"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_listing_above_matches_the_noxfile() -> None:
    listing = {entry["session"]: entry["tags"] for entry in _nox_listing()}
    listed = {entry["session"]: entry["tags"] for entry in NOX_LISTING[:4]}
    assert {name: listing[name] for name in listed} == listed
    declared = {
        name: list(target.device.tags)
        for name, target in BUILTIN_TARGETS.items()
        if target.kind == "backend"
    }
    assert listing == declared, "every declared backend, and nothing else, is a tagged session"


def test_gpu_jobs_have_longer_timeouts_than_cpu_jobs() -> None:
    timeouts = {job["backend"]: job["timeout_minutes"] for job in jobs()}
    assert timeouts["cuda"] == timeouts["rocm"] == DEVICE_KINDS["cuda"].timeout_minutes
    assert timeouts["cpu"] == ci_matrix.DEFAULT_TIMEOUT_MINUTES
    assert all(isinstance(minutes, int) and minutes > 0 for minutes in timeouts.values())


def test_workflow_jobs_have_timeouts_and_a_strict_generator_step(workflow: str) -> None:
    assert "timeout-minutes: ${{ matrix.timeout_minutes }}" in workflow
    step = workflow[workflow.index("- id: matrix") : workflow.index("\n  conformance:")]
    assert "set -euo pipefail" in step, "a failing generator must fail its step"
    assert 'echo "matrix=$(python' not in step, "$(...) inside echo swallows the exit code"
    assert "> matrix.json" in step
    assert "> releases.json" in step
    assert workflow.count("requirements/tools.txt") == 4, "every job installs the same tools"


def test_a_failing_generator_prints_nothing_on_stdout(monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(NOX_LISTING)))
    assert ci_matrix.main(["--shards", "metal=2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1


# --- the Buildkite pipeline --------------------------------------------------------------------


def buildkite_pipeline(monkeypatch, capsys, shards: str = "cuda=4,rocm=2") -> dict:
    yaml = pytest.importorskip("yaml")  # the tests session installs PyYAML
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(NOX_LISTING)))
    assert ci_matrix.main(["--shards", shards, "--format", "buildkite"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_buildkite_pipeline_is_yaml_with_one_step_per_job(monkeypatch, capsys) -> None:
    steps = buildkite_pipeline(monkeypatch, capsys)["steps"]
    commands = [step for step in steps if "command" in step]
    assert [step["label"] for step in commands[:-1]] == [f"conformance {j['name']}" for j in jobs()]
    assert len({step["key"] for step in commands}) == len(commands), "keys are unique"
    cuda = [step for step in commands if step["label"].startswith("conformance cuda")]
    assert cuda[1]["command"].endswith(".venv/bin/python -m nox -s 'cuda' -- --shard 2/4")
    assert {step["agents"]["queue"] for step in cuda} == {"nvidia"}
    assert all(step["timeout_in_minutes"] > 0 for step in commands)
    assert all(step["artifact_paths"] for step in commands)


def test_buildkite_pipeline_ends_with_a_release_sign_off(monkeypatch, capsys) -> None:
    steps = buildkite_pipeline(monkeypatch, capsys)["steps"]
    wait, signoff = steps[-2:]
    assert wait == {"wait": None, "continue_on_failure": True}, "failed shards are signed off"
    assert "artifact download 'reports/junit/*'" in signoff["command"]
    assert signoff["command"].endswith("nox -s signoff -- --release")


def test_buildkite_yaml_quotes_what_yaml_would_misread() -> None:
    from conformance.ci.buildkite import pipeline_yaml

    job = {**jobs()[0], "name": "a: b # c", "session": "x"}
    yaml = pytest.importorskip("yaml")
    (step, _, _) = yaml.safe_load(pipeline_yaml([job]))["steps"]
    assert step["label"] == "conformance a: b # c"


def test_workflow_parses_as_yaml_with_a_timeout_on_every_job(workflow: str) -> None:
    yaml = pytest.importorskip("yaml")  # the tests session installs PyYAML
    document = yaml.safe_load(workflow)
    assert set(document["jobs"]) == {"plan", "conformance", "engine-releases", "signoff"}
    assert document["jobs"]["conformance"]["timeout-minutes"] == "${{ matrix.timeout_minutes }}"
    assert document["jobs"]["engine-releases"]["timeout-minutes"] == "${{ matrix.timeout_minutes }}"
    assert all(
        isinstance(document["jobs"][job]["timeout-minutes"], int) for job in ("plan", "signoff")
    )
