"""pytest plugin for the reporting side of a conformance run: shards, expectations, sidecar.

Registered by ``conformance.harness.plugin`` (its own options, ``--backend`` among them,
live there). What it does, and when:

- ``--shard I/N`` keeps the tests of shard I (1-based) of N after every other selection
  (``-k``, ``-m``, expectation marks): balanced by the recorded durations of
  ``.test_durations`` where that file and pytest-split are present, else by sha256 of the node
  id (`conformance.runs.shards`).
- Every option and ``MLA_GPU_COUNT`` is checked at configuration: a bad one is a one-line
  usage error, before any report is touched.
- A partial selection (`conformance.harness.selection`) writes its conventional JUnit file
  under ``partial/``, so it never supersedes the full report; its sidecar says so.
- At session start of a full run, the reports it supersedes move to ``reports/previous/``
  (`conformance.runs.archive`).
- Expectations: when conformance tests (``tests/conformance/test_*.py``) are collected, the
  entries of ``conformance/expectations/<backend>.txt`` (or ``--expectations-dir``) become
  ``xfail(strict=True)`` / ``skip`` marks; entries that match no test are warned as stale.
- Every collected test gets ``nodeid`` (and ``case_id``, the parameter id) as JUnit testcase
  properties, so the sign-off can compare the JUnit report with the collected ids.
- The sidecar (`conformance.harness.sidecar`) is first written marked ``"finished": false``
  at session start, so a run that crashes before pytest writes its JUnit leaves a trace; once
  pytest has written the JUnit file (``pytest_unconfigure``) its sha256 is added (``junit_sha256``).
- On a multi-GPU host, each xdist worker of a backend with a GPU device kind sees one GPU
  (`conformance.harness.gpu_pinning`).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from conformance.harness import gpu_pinning, sidecar
from conformance.harness.plugin import is_conformance_test
from conformance.harness.run_state import (
    STATE_KEY,
    RunState,
    backend_name,
    is_worker,
    junit_path,
    relative,
)
from conformance.harness.selection import partial_reason
from conformance.runs.archive import archive_superseded
from conformance.runs.environment import gpu_count
from conformance.runs.expectations import (
    ExpectationFileError,
    expectations_path,
    load_expectations,
    match_expectation,
    stale_entries,
)
from conformance.runs.names import parse_shard, partial_junit_path
from conformance.runs.shards import (
    DURATIONS_FILE,
    duration_algorithm,
    load_durations,
    select_for_shard,
)

WORKER_OUTPUT_KEY = "mla_report"
DURATIONS_KEY = pytest.StashKey["dict[str, float] | None"]()


class StaleExpectationWarning(pytest.PytestWarning):
    """An expectation-file entry matches no collected test."""


def _device_runtime_initialised() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # an odd torch build: assume the worst
        return True


def _terminal_line(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not is_worker(config):
        reporter.write_line(text)


# --- options and configuration --------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--shard``, ``--shard-durations`` and ``--expectations-dir``."""
    group = parser.getgroup("mla-report", "MLA conformance reporting")
    group.addoption(
        "--shard",
        metavar="I/N",
        default=None,
        help="run only shard I of N (1-based; balanced by recorded durations where "
        f"{DURATIONS_FILE} and pytest-split exist, else by sha256 of the node id)",
    )
    group.addoption(
        "--shard-durations",
        metavar="FILE",
        default=None,
        help=f"durations file that balances --shard (default: <rootdir>/{DURATIONS_FILE})",
    )
    group.addoption(
        "--expectations-dir",
        metavar="DIR",
        default=None,
        help="directory of <backend>.txt expectation files (default: conformance/expectations)",
    )


def _usage(option: str, error: Exception) -> pytest.UsageError:
    return pytest.UsageError(f"{option}: {error}")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Check the options, route a partial run's JUnit, pin a worker's GPU, set up the state."""
    shard_text = config.getoption("shard", None)
    try:
        shard = parse_shard(shard_text) if shard_text else None
    except ValueError as error:
        raise _usage("--shard", error) from None
    try:
        gpu_count(os.environ)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    backend = backend_name(config)
    directory = config.getoption("expectations_dir", None)
    state = RunState(
        backend=backend,
        shard=shard,
        junit_path=junit_path(config),
        expectations_file=expectations_path(backend, Path(directory) if directory else None),
    )
    reason = partial_reason(config)
    if reason is not None:
        state.selection, state.selection_reason = "partial", reason
        if state.junit_path is not None and sidecar.is_conventional(state):
            state.junit_path = partial_junit_path(state.junit_path)
            config.option.xmlpath = str(state.junit_path)  # before junitxml reads it
    if shard is not None:
        config.stash[DURATIONS_KEY] = _durations(config)
        has_split = config.stash[DURATIONS_KEY] is not None and duration_algorithm()
        state.shard_algorithm = "durations" if has_split else "hash"
    if is_worker(config):
        pin_worker(config, state)
    config.stash[STATE_KEY] = state


def _durations(config: pytest.Config) -> dict[str, float] | None:
    option = config.getoption("shard_durations", None)
    path = Path(option) if option else config.rootpath / DURATIONS_FILE
    if option and not path.is_file():
        raise _usage("--shard-durations", FileNotFoundError(f"{path} does not exist"))
    try:
        return load_durations(path)
    except ValueError as error:
        raise _usage("--shard-durations", error) from None


def pin_worker(config: pytest.Config, state: RunState) -> None:
    """Give this xdist worker its own device of the backend's kind (`gpu_pinning`)."""
    worker_input = config.workerinput  # type: ignore[attr-defined]
    state.pinned = gpu_pinning.pinned_for_backend(
        state.backend,
        os.environ,
        worker_id=str(worker_input.get("workerid", "")),
        worker_count=int(worker_input.get("workercount", 1)),
    )
    if state.pinned and _device_runtime_initialised():
        warnings.warn(
            f"torch initialised its device runtime before the report plugin pinned "
            f"{state.pinned}; this worker may not be limited to one GPU",
            pytest.PytestWarning,
            stacklevel=1,
        )
    os.environ.update(state.pinned)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Show the shard, the selection and the expectation file in pytest's header."""
    state = config.stash[STATE_KEY]
    shard = f"shard {state.shard} ({state.shard_algorithm})" if state.shard else "no shard"
    selection = state.selection
    if state.selection_reason:
        selection += f" ({state.selection_reason})"
    return [f"mla-report: {shard}; {selection} selection; expectations {state.expectations_file}"]


# --- collection -----------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Generator[None, None, None]:
    """Mark expectations before the other hooks run; select the shard after all of them."""
    _apply_expectations(config, items)
    result = yield
    _select_shard(config, items)
    return result


def _apply_expectations(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE_KEY]
    conformance_items = [item for item in items if is_conformance_test(item.path)]
    state.conformance_collected = bool(conformance_items)
    if not conformance_items:
        return
    try:
        entries = load_expectations(state.expectations_file)
    except ExpectationFileError as error:
        raise pytest.UsageError(str(error)) from None
    for item in conformance_items:
        entry = match_expectation(entries, item.nodeid)
        if entry is None:
            continue
        if entry.kind == "skip":
            item.add_marker(pytest.mark.skip(reason=entry.mark_reason()))
        else:
            item.add_marker(pytest.mark.xfail(reason=entry.mark_reason(), strict=True))
    stale = stale_entries(entries, [item.nodeid for item in conformance_items])
    state.stale_expectations = [f"{entry.location}: {entry.pattern}" for entry in stale]
    for entry in stale:
        warnings.warn_explicit(
            StaleExpectationWarning(
                f"{entry.file}:{entry.line}: expectation {entry.pattern!r} ({entry.kind}) "
                f"matches no collected test of backend {state.backend}; remove it"
            ),
            StaleExpectationWarning,
            filename=str(entry.file),
            lineno=entry.line,
        )


def _select_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE_KEY]
    state.collected_ids = [item.nodeid for item in items]
    if state.shard is not None:
        durations = config.stash.get(DURATIONS_KEY, None)
        selected_ids = set(select_for_shard(state.collected_ids, state.shard, durations))
        keep = [item for item in items if item.nodeid in selected_ids]
        drop = [item for item in items if item.nodeid not in selected_ids]
        if drop:
            state.sharding_now = True
            try:
                config.hook.pytest_deselected(items=drop)
            finally:
                state.sharding_now = False
        items[:] = keep
        _terminal_line(
            config,
            f"shard {state.shard} ({state.shard_algorithm}): running {len(keep)} of "
            f"{len(state.collected_ids)} items",
        )
    state.selected_ids = [item.nodeid for item in items]
    if state.junit_path is not None or state.conformance_collected:
        for item in items:
            item.user_properties.append(("nodeid", item.nodeid))
            callspec = getattr(item, "callspec", None)
            if callspec is not None:
                item.user_properties.append(("case_id", callspec.id))


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Count the tests other filters (``-k``, ``-m``, ``--deselect``) removed."""
    if not items:
        return
    state = items[0].config.stash.get(STATE_KEY, None)
    if state is not None and not state.sharding_now:
        state.filtered_out += len(items)


# --- session: archive, sidecar and worker hand-over -----------------------------------------


def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller: move superseded reports aside, then leave an unfinished sidecar."""
    config = session.config
    state = config.stash[STATE_KEY]
    if is_worker(config) or not sidecar.wanted(state):
        return
    assert state.junit_path is not None
    if state.selection == "partial":
        _terminal_line(
            config,
            f"partial selection ({state.selection_reason}): JUnit report "
            f"{relative(state.junit_path, config.rootpath)}, which supersedes no full report",
        )
    elif sidecar.is_conventional(state):
        moved = archive_superseded(state.junit_path, state.backend, state.shard)
        if moved is not None:
            _terminal_line(config, f"earlier reports moved to {moved}")
    sidecar.write(config, state, finished=False, exitstatus=None)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Worker: hand facts to the controller. Controller: stamp the suite, write the sidecar."""
    config = session.config
    state = config.stash[STATE_KEY]
    if is_worker(config):
        config.workeroutput[WORKER_OUTPUT_KEY] = sidecar.process_facts(state)  # type: ignore[attr-defined]
        return
    if not sidecar.wanted(state):
        return
    sidecar.stamp_junit_suite(config, state)
    sidecar.write(config, state, finished=True, exitstatus=int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Controller: add the sha256 of the JUnit file to the sidecar.

    pytest writes the JUnit file in its own ``pytest_sessionfinish``; every
    ``pytest_sessionfinish`` has returned before any ``pytest_unconfigure`` runs, so the file
    hashed here is the finished one.
    """
    state = config.stash.get(STATE_KEY, None)
    if state is None or is_worker(config) or not sidecar.wanted(state):
        return
    sidecar.seal(state)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Controller under xdist: keep what a worker learnt (collection, device, versions)."""
    report = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
    if report is None:
        return
    state = node.config.stash[STATE_KEY]
    state.worker_reports.append(report)
    state.conformance_collected = state.conformance_collected or bool(
        report.get("conformance_collected")
    )
    if state.collected_ids is None and report.get("collected_ids") is not None:
        state.collected_ids = list(report["collected_ids"])
        state.selected_ids = list(report.get("selected_ids") or [])
        state.filtered_out = int(report.get("filtered_out") or 0)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Under xdist, say how many items this shard ran (workers cannot print)."""
    state = config.stash[STATE_KEY]
    if state.worker_reports and state.shard is not None and state.collected_ids is not None:
        selected = len(state.selected_ids or [])
        terminalreporter.write_line(
            f"shard {state.shard}: ran {selected} of {len(state.collected_ids)} items"
        )
