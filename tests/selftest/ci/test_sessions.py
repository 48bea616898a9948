"""What the noxfile checks before a session installs or runs anything, and how uv is set up."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conformance.ci import installer, sessions
from conformance.ci.sessions import SessionArgumentError, check_arguments
from conformance.runs.names import Shard
from conformance.targets import CPU, CUDA, ROCM

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_good_arguments_give_the_backend_and_shard() -> None:
    assert check_arguments("cuda", ["--shard", "2/4", "-x"], {}) == ("cuda", Shard(2, 4))
    assert check_arguments("cpu", ["--backend=mine", "--shard=1/1"], {}) == ("mine", Shard(1, 1))
    assert check_arguments("rocm", [], {"MLA_GPU_COUNT": "8"}) == ("rocm", None)


@pytest.mark.parametrize(
    ("posargs", "env", "message"),
    [
        (["--shard", "4/3"], {}, "--shard: shard '4/3': the index I must be between 1 and 3"),
        (["--shard", "abc"], {}, "--shard: shard 'abc' is not of the form I/N"),
        (["--shard=0/0"], {}, "--shard: shard '0/0': the count N must be at least 1"),
        (["--shard"], {}, "--shard: expected a value after it"),
        (["--backend", "a/b"], {}, "--backend: backend name 'a/b'"),
        ([], {"MLA_GPU_COUNT": "abc"}, "MLA_GPU_COUNT='abc': expected a whole number"),
        ([], {"MLA_GPU_COUNT": "0"}, "MLA_GPU_COUNT='0'"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    posargs: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SessionArgumentError) as error:
        check_arguments("cuda", posargs, env)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_test_paths_are_told_from_option_values() -> None:
    assert sessions.has_test_paths(["tests/conformance/test_stubs.py"], REPO_ROOT)
    assert sessions.has_test_paths(["-x", "tests/conformance/test_stubs.py::test_x"], REPO_ROOT)
    assert not sessions.has_test_paths(["-k", "tests"], REPO_ROOT), "-k's value is no path"
    assert not sessions.has_test_paths(["--shard", "2/4", "-x"], REPO_ROOT)


def test_workers_follow_the_backend_unless_given() -> None:
    assert sessions.worker_args(CPU, [], 1) == ["-n", "auto"]
    assert sessions.worker_args(CUDA, [], 4) == ["-n", "4"]
    assert sessions.worker_args(CUDA, [], 1) == ["-n", "1"]  # an abort takes one test down
    assert sessions.worker_args(ROCM, [], 0) == []
    assert sessions.worker_args(CPU, ["-n", "1"], 1) == []


def test_an_unavailable_backend_is_a_skip_reason(tmp_path: Path) -> None:
    junit = tmp_path / "cuda.xml"
    since = time.time() - 1
    assert sessions.run_outcome(junit, since) is None
    sidecar = {"available": False, "availability_reason": "no CUDA device: torch 2.13.0+cpu"}
    (tmp_path / "cuda.meta.json").write_text(json.dumps(sidecar))
    outcome = sessions.run_outcome(junit, since)
    assert sessions.skip_reason(outcome, "cuda") == "cuda: no CUDA device: torch 2.13.0+cpu"
    assert sessions.skip_reason({"available": True}, "cuda") is None
    assert sessions.run_outcome(junit, time.time() + 60) is None, "an older sidecar is not it"


def test_a_partial_run_s_sidecar_is_found(tmp_path: Path) -> None:
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "cpu.meta.json").write_text('{"selection": "partial"}')
    assert sessions.run_outcome(tmp_path / "cpu.xml", 0) == {"selection": "partial"}


PIP_CONFIG = """\
global.constraint='/etc/pip/constraints.txt'
global.extra-index-url='file:///srv/a/simple file:///srv/b/simple'
global.find-links='/srv/old'
:env:.find-links='/srv/wheels'
:env:.default-timeout='180'
"""


def test_pip_configuration_is_handed_to_uv() -> None:
    settings = installer.parse_pip_config(PIP_CONFIG)
    assert settings == {
        "constraint": "/etc/pip/constraints.txt",
        "extra-index-url": "file:///srv/a/simple file:///srv/b/simple",
        "find-links": "/srv/wheels",
    }
    assert installer.uv_environment(settings, {}) == {
        "UV_CONSTRAINT": "/etc/pip/constraints.txt",
        "UV_EXTRA_INDEX_URL": "file:///srv/a/simple file:///srv/b/simple",
        "UV_FIND_LINKS": "/srv/wheels",
        "UV_INDEX_STRATEGY": "unsafe-best-match",
    }


def test_the_users_own_uv_settings_win() -> None:
    settings = {"find-links": "/srv/wheels"}
    env = installer.uv_environment(
        settings, {"UV_FIND_LINKS": "/mine", "UV_INDEX_STRATEGY": "first-index"}
    )
    assert env == {}
    assert installer.uv_environment({}, {}) == {}
