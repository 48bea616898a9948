"""Fixtures of the audit self-tests: tree writers, the command line, the engine tree."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from conformance.audit import cli


def _load_engine_tree() -> ModuleType:
    name = "mla_selftest_audit_engine_tree"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("engine_tree.py")
        )
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[name]


@pytest.fixture
def engine() -> ModuleType:
    """The `engine_tree` module: `write_engine_tree`, `EXPECTED`, `EXPECTED_OLD`."""
    return _load_engine_tree()


@pytest.fixture
def write_tree() -> Callable[[Path, dict[str, str]], Path]:
    """Write ``{relative path: source}`` (dedented) under a root; return the root."""

    def write(root: Path, files: dict[str, str]) -> Path:
        for relpath, source in files.items():
            path = root / relpath
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source), encoding="utf-8")
        return root

    return write


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """`cli.run` in-process without cache or pyproject lookup: (status, stdout, stderr)."""

    def run(*argv: str, config: bool = False) -> tuple[int, str, str]:
        extra = ["--no-cache", "--jobs", "1"] + ([] if config else ["--no-config"])
        status = cli.run([*argv, *extra])
        out, err = capsys.readouterr()
        return status, out, err

    return run
