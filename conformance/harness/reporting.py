"""pytest plugin for the reporting side of a conformance run: shards, expectations, sidecar.

Registered by ``conformance.harness.plugin`` (its own options, ``--backend`` among them,
live there).
What it does, and when:

- ``--shard I/N`` keeps the tests of shard I (1-based) of N, chosen by sha256 of the node id
  (`conformance.harness.sharding`), after every other selection (``-k``, ``-m``, expectation marks).
- Expectations: when conformance tests (``tests/conformance/test_*.py``) are collected, the
  entries of ``conformance/expectations/<backend>.txt`` (or ``--expectations-dir``) become
  ``xfail(strict=True)`` / ``skip`` marks; entries that match no test are warned as stale.
- Every collected test gets ``nodeid`` (and ``case_id``, the parameter id) as JUnit testcase
  properties, so the sign-off can compare the JUnit report with the collected ids.
- The sidecar ``<junit path minus .xml>.meta.json``, written by the controller only (never an
  xdist worker), holds the backend, shard, collected and selected ids, availability, device,
  versions, git commit and timestamps. It is written when ``--junitxml`` is set and either the
  file name follows the convention (``<backend>.xml`` / ``<backend>-shard-I-of-N.xml``) or
  conformance tests were collected; a first version marked ``"finished": false`` is written at
  session start so a run that crashes before pytest writes its JUnit leaves a trace. Once pytest
  has written the JUnit file (``pytest_unconfigure``), its sha256 is added as ``junit_sha256``.
- On a multi-GPU host, each xdist worker of a cuda/rocm run sees one GPU
  (`conformance.harness.gpu_pinning`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
import uuid
import warnings
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.harness import gpu_pinning, provenance
from conformance.harness.expectations import (
    ExpectationFileError,
    expectations_path,
    load_expectations,
    match_expectation,
    stale_entries,
)
from conformance.harness.sharding import (
    Shard,
    junit_name,
    parse_shard,
    select_for_shard,
    sidecar_path,
)
from conformance.signoff.atomic import atomic_write_text

SIDECAR_FORMAT = "mla-conformance-run/1"
WORKER_OUTPUT_KEY = "mla_report"
DEFAULT_BACKEND = "cpu"
BACKEND_ENVIRONMENT_VARIABLE = "MLA_CONFORMANCE_BACKEND"


class StaleExpectationWarning(pytest.PytestWarning):
    """An expectation-file entry matches no collected test."""


@dataclass
class RunState:
    """What the plugin learns during one session (kept in ``config.stash``)."""

    backend: str
    shard: Shard | None
    junit_path: Path | None
    expectations_file: Path
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: str = field(default_factory=lambda: _now())
    conformance_collected: bool = False
    collected_ids: list[str] | None = None
    selected_ids: list[str] | None = None
    filtered_out: int = 0
    stale_expectations: list[str] = field(default_factory=list)
    sharding_now: bool = False
    pinned: dict[str, str] = field(default_factory=dict)
    worker_reports: list[dict[str, Any]] = field(default_factory=list)


STATE_KEY = pytest.StashKey[RunState]()


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _backend_name(config: pytest.Config) -> str:
    try:
        value = config.getoption("backend")
    except ValueError:  # conformance.harness.plugin (which adds --backend) is not loaded
        value = None
    return str(value or os.environ.get(BACKEND_ENVIRONMENT_VARIABLE) or DEFAULT_BACKEND)


def _junit_path(config: pytest.Config) -> Path | None:
    xml_path = getattr(config.option, "xmlpath", None)
    if not xml_path:
        return None
    expanded = os.path.expanduser(os.path.expandvars(xml_path))
    return Path(os.path.normpath(os.path.abspath(expanded)))


def _availability(backend: str) -> tuple[bool | None, str | None]:
    """``(available, reason)`` from ``backends.registry``; ``(None, None)`` if it cannot tell.

    The registry is asked only once something else (the conformance plugin) has imported it:
    importing it imports torch, too slow a price for a sidecar field in a selftest run.
    """
    registry = sys.modules.get("backends.registry")
    if registry is None:
        return None, None
    try:
        availability = registry.get_backend(backend).availability()
        return bool(availability.available), str(getattr(availability, "reason", "") or "")
    except Exception as error:  # the registry is optional; its failure is a fact to record
        return None, f"availability unknown: {type(error).__name__}: {error}"


def _device_kind(backend: str) -> str | None:
    """The kind of device the backend's tensors live on here: cpu, cuda, rocm, or none."""
    registry, torch = sys.modules.get("backends.registry"), sys.modules.get("torch")
    if registry is None or torch is None:
        return None
    try:
        if registry.get_backend(backend).device.type == "cpu":
            return "cpu"
        if not torch.cuda.is_available():
            return "none"
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    except Exception:  # a fact we cannot read is simply absent
        return None


def _device_runtime_initialised() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # an odd torch build: assume the worst
        return True


def _is_conformance_item(item: pytest.Item) -> bool:
    parent = Path(item.path).parent
    return parent.name == "conformance" and parent.parent.name == "tests"


def _terminal_line(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not _is_worker(config):
        reporter.write_line(text)


# --- options and configuration --------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--shard`` and ``--expectations-dir``."""
    group = parser.getgroup("mla-report", "MLA conformance reporting")
    group.addoption(
        "--shard",
        metavar="I/N",
        default=None,
        help="run only shard I of N (1-based; chosen by sha256 of the node id, the same on "
        "every machine)",
    )
    group.addoption(
        "--expectations-dir",
        metavar="DIR",
        default=None,
        help="directory of <backend>.txt expectation files (default: conformance/expectations)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Parse ``--shard``, pin an xdist worker's GPU, and set up the run state."""
    shard_text = config.getoption("shard", None)
    try:
        shard = parse_shard(shard_text) if shard_text else None
    except ValueError as error:
        raise pytest.UsageError(f"--shard: {error}") from None
    backend = _backend_name(config)
    directory = config.getoption("expectations_dir", None)
    state = RunState(
        backend=backend,
        shard=shard,
        junit_path=_junit_path(config),
        expectations_file=expectations_path(backend, Path(directory) if directory else None),
    )
    if _is_worker(config):
        worker_input = config.workerinput  # type: ignore[attr-defined]
        state.pinned = gpu_pinning.pinned_devices(
            backend,
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
    config.stash[STATE_KEY] = state


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Show the shard and the expectation file in pytest's header."""
    state = config.stash[STATE_KEY]
    shard = f"shard {state.shard}" if state.shard else "no shard"
    return [f"mla-report: {shard}; expectations {state.expectations_file}"]


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
    conformance_items = [item for item in items if _is_conformance_item(item)]
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
        selected_ids = set(select_for_shard(state.collected_ids, state.shard))
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
            f"shard {state.shard}: running {len(keep)} of {len(state.collected_ids)} items",
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


# --- session: sidecar and worker hand-over --------------------------------------------------


def _sidecar_wanted(state: RunState) -> bool:
    if state.junit_path is None:
        return False
    try:
        conventional = state.junit_path.name == junit_name(state.backend, state.shard)
    except ValueError:
        conventional = False
    return conventional or state.conformance_collected


def _process_facts(state: RunState) -> dict[str, Any]:
    """Facts only the process that ran the tests knows (torch is imported there)."""
    available, reason = _availability(state.backend)
    return {
        "collected_ids": state.collected_ids,
        "selected_ids": state.selected_ids,
        "filtered_out": state.filtered_out,
        "conformance_collected": state.conformance_collected,
        "stale_expectations": state.stale_expectations,
        "available": available,
        "availability_reason": reason,
        "device": provenance.device_name(state.backend),
        "device_kind": _device_kind(state.backend),
        "versions": provenance.package_versions(),
        "pinned": state.pinned,
        **provenance.torch_build(),
    }


def _sidecar(
    config: pytest.Config, state: RunState, *, finished: bool, exitstatus: int | None
) -> dict[str, Any]:
    facts = provenance.run_facts(state.backend, config.rootpath)
    worker_facts = [report for report in state.worker_reports if report.get("collected_ids")]
    if state.worker_reports:
        process = worker_facts[0] if worker_facts else state.worker_reports[0]
    elif finished:
        process = _process_facts(state)
    else:
        process = {}
    facts.update({key: value for key, value in process.items() if value is not None})
    facts["devices"] = sorted(
        {str(report["device"]) for report in state.worker_reports if report.get("device")}
    )
    return {
        "format": SIDECAR_FORMAT,
        "backend": state.backend,
        "shard": None if state.shard is None else str(state.shard),
        "junit": None if state.junit_path is None else state.junit_path.name,
        "run_id": state.run_id,
        "started": state.started,
        "finished_at": _now() if finished else None,
        "finished": finished,
        "exitstatus": exitstatus,
        "args": [str(argument) for argument in config.invocation_params.args],
        "xdist_workers": len(state.worker_reports),
        "expectations_file": _relative(state.expectations_file, config.rootpath),
        **facts,
    }


def _write_sidecar(config: pytest.Config, state: RunState, **kwargs: Any) -> None:
    assert state.junit_path is not None
    document = _sidecar(config, state, **kwargs)
    atomic_write_text(sidecar_path(state.junit_path), json.dumps(document, indent=2) + "\n")


def _stamp_junit_suite(config: pytest.Config, state: RunState) -> None:
    """Name the controller's JUnit suite ``mla-<backend>`` and add run properties to it."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:
        return
    log_xml = config.stash.get(xml_key, None)
    if log_xml is None:
        return
    if getattr(log_xml, "suite_name", None) == "pytest":
        log_xml.suite_name = f"mla-{state.backend}"
    log_xml.add_global_property("backend", state.backend)
    log_xml.add_global_property("shard", "" if state.shard is None else str(state.shard))
    log_xml.add_global_property("run_id", state.run_id)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller: leave an unfinished sidecar, so a run that crashes is visible."""
    config = session.config
    state = config.stash[STATE_KEY]
    if not _is_worker(config) and _sidecar_wanted(state):
        _write_sidecar(config, state, finished=False, exitstatus=None)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Worker: hand facts to the controller. Controller: stamp the suite, write the sidecar."""
    config = session.config
    state = config.stash[STATE_KEY]
    if _is_worker(config):
        config.workeroutput[WORKER_OUTPUT_KEY] = _process_facts(state)  # type: ignore[attr-defined]
        return
    if not _sidecar_wanted(state):
        return
    _stamp_junit_suite(config, state)
    _write_sidecar(config, state, finished=True, exitstatus=int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Controller: add the sha256 of the JUnit file to the sidecar.

    pytest writes the JUnit file in its own ``pytest_sessionfinish``; every
    ``pytest_sessionfinish`` has returned before any ``pytest_unconfigure`` runs, so the file
    hashed here is the finished one.
    """
    state = config.stash.get(STATE_KEY, None)
    if state is None or _is_worker(config) or not _sidecar_wanted(state):
        return
    assert state.junit_path is not None
    companion = sidecar_path(state.junit_path)
    try:
        document = json.loads(companion.read_text(encoding="utf-8"))
        data = state.junit_path.read_bytes()
    except (OSError, ValueError):
        return  # no JUnit file (or sidecar) to seal; the sign-off names what is missing
    if not isinstance(document, dict) or document.get("run_id") != state.run_id:
        return
    document["junit_sha256"] = hashlib.sha256(data).hexdigest()
    atomic_write_text(companion, json.dumps(document, indent=2) + "\n")


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


def _relative(path: Path, root: Path) -> str:
    """`path` relative to the run's root directory when it lies below it (no machine paths)."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
