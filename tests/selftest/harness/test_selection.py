"""The partial-selection rule, both ways for each way of narrowing a run.

A run is partial when ``-k``, ``-m``, ``--deselect``, ``--ignore`` or positional paths / node
ids leave out part of ``tests/conformance``; it is full without them, and when a positional
argument names ``tests/conformance`` itself or a directory above it. The rule reads the
parsed options of a pytest config; the end-to-end runs are in test_report_safety.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.harness.selection import partial_reason

pytestmark = pytest.mark.selftest

ROOT = Path("/repo")
FILE = "tests/conformance/test_metadata.py"


def _config(
    *args: str,
    invoked_in: Path = ROOT,
    keyword: str = "",
    markexpr: str = "",
    deselect: list[str] | None = None,
    ignore: list[str] | None = None,
) -> SimpleNamespace:
    """What `partial_reason` reads of a pytest config, as pytest parses a command line."""
    source = pytest.Config.ArgsSource
    return SimpleNamespace(
        option=SimpleNamespace(
            keyword=keyword, markexpr=markexpr, deselect=deselect, ignore=ignore, ignore_glob=None
        ),
        invocation_params=SimpleNamespace(dir=invoked_in),
        args=list(args) or ["tests/conformance"],
        args_source=source.ARGS if args else source.TESTPATHS,
        rootpath=ROOT,
    )


@pytest.mark.parametrize(
    ("args", "invoked_in"),
    [
        ((), ROOT),
        (("tests/conformance",), ROOT),
        (("tests/conformance/",), ROOT),
        (("tests",), ROOT),
        ((".",), ROOT),
        ((str(ROOT / "tests" / "conformance"),), ROOT),
        (("conformance",), ROOT / "tests"),
        (("..",), ROOT / "tests" / "conformance"),
        (("tests/conformance", f"{FILE}::test_heavy"), ROOT),
    ],
    ids=["none", "the-set", "trailing-slash", "parent", "root", "absolute", "from-tests",
         "from-inside", "set-and-node-id"],
)  # fmt: skip
def test_paths_covering_the_conformance_set_are_a_full_run(
    args: tuple[str, ...], invoked_in: Path
) -> None:
    assert partial_reason(_config(*args, invoked_in=invoked_in)) is None


@pytest.mark.parametrize(
    ("args", "invoked_in"),
    [
        ((FILE,), ROOT),
        (("tests/conformance/sub",), ROOT),
        ((f"{FILE}::test_heavy",), ROOT),
        (("tests/conformance::test_x",), ROOT),
        (("test_metadata.py",), ROOT / "tests" / "conformance"),
        (("conformance/test_metadata.py",), ROOT / "tests"),
        ((str(ROOT / FILE),), ROOT),
        ((FILE, "tests/conformance/test_plan.py"), ROOT),
        (("tests/selftest",), ROOT),
    ],
    ids=["file", "subdirectory", "node-id", "node-id-on-the-set", "file-from-inside",
         "file-from-tests", "absolute-file", "two-files", "a-sibling"],
)  # fmt: skip
def test_paths_and_node_ids_below_the_set_are_a_partial_run(
    args: tuple[str, ...], invoked_in: Path
) -> None:
    reason = partial_reason(_config(*args, invoked_in=invoked_in))
    assert reason == "selected " + " ".join(args)


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"keyword": "heavy"}, "-k heavy"),
        ({"markexpr": "not slow"}, "-m not slow"),
        ({"deselect": [f"{FILE}::test_heavy"]}, f"--deselect {FILE}::test_heavy"),
        ({"ignore": [FILE]}, f"--ignore {FILE}"),
        ({"keyword": "a", "markexpr": "b"}, "-k a; -m b"),
    ],
    ids=["-k", "-m", "--deselect", "--ignore", "-k-and-m"],
)
@pytest.mark.parametrize("args", [(), ("tests/conformance",)], ids=["no-path", "the-set"])
def test_each_narrowing_option_makes_a_run_partial(
    options: dict[str, object], reason: str, args: tuple[str, ...]
) -> None:
    assert partial_reason(_config(*args, **options)) == reason  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [{"keyword": ""}, {"markexpr": ""}, {"deselect": []}, {"ignore": []}],
    ids=["-k", "-m", "--deselect", "--ignore"],
)
def test_an_empty_narrowing_option_leaves_a_run_full(options: dict[str, object]) -> None:
    assert partial_reason(_config(**options)) is None  # type: ignore[arg-type]


def test_a_narrowing_option_and_a_node_id_give_both_reasons() -> None:
    reason = partial_reason(_config(f"{FILE}::test_heavy", keyword="heavy"))
    assert reason == f"-k heavy; selected {FILE}::test_heavy"
