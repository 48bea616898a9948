"""What the pytest plugin records in the sidecar of a conformance run: its `RunRecord`.

Written by the controller only (never an xdist worker), from what it and the process that ran
the tests learnt: the backend, shard, whether the selection was full or partial
(``selection``, ``selection_reason``), the collected and selected ids, the expectation file
used and its sha256 (``expectations_file``, ``expectations_sha256``: null when there is no
such file), availability, the backend's declaration, device, versions, git commit and
timestamps (`conformance.runs.record`).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import pytest

from conformance.harness.not_applicable import recorded_declaration
from conformance.harness.run_state import RunState, now, relative
from conformance.runs import provenance
from conformance.runs.expectations import expectations_sha256
from conformance.runs.names import junit_name
from conformance.runs.record import MachineFacts, RunRecord, SessionFacts
from conformance.runs.sidecar import seal_sidecar, write_sidecar

MACHINE_OVERRIDES = ("device", "versions", "torch_cuda", "torch_hip")
"""Machine facts the process that ran the tests knows better than the controller."""


def availability(backend: str) -> tuple[bool | None, str | None]:
    """``(available, reason)`` from ``backends.registry``; ``(None, None)`` if it cannot tell.

    The registry is asked only once something else (the conformance plugin) has imported it:
    importing it imports torch, too slow a price for a sidecar field in a selftest run.
    """
    registry = sys.modules.get("backends.registry")
    if registry is None:
        return None, None
    try:
        found = registry.get_backend(backend).availability()
        return bool(found.available), str(getattr(found, "reason", "") or "")
    except Exception as error:  # the registry is optional; its failure is a fact to record
        return None, f"availability unknown: {type(error).__name__}: {error}"


def backend_provenance(backend: str) -> dict[str, str] | None:
    """What the backend's decode runs (`Backend.provenance`); None where it says nothing."""
    registry = sys.modules.get("backends.registry")
    if registry is None:
        return None
    try:
        found = registry.get_backend(backend).provenance()
        return {str(k): str(v) for k, v in found.items()} or None
    except Exception as error:  # recorded as a fact, like an unknown availability
        return {"error": f"{type(error).__name__}: {error}"}


def device_kind(backend: str) -> str | None:
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


def is_conventional(state: RunState) -> bool:
    """Whether the JUnit file is named ``<backend>.xml`` / ``<backend>-shard-I-of-N.xml``."""
    if state.junit_path is None:
        return False
    try:
        return state.junit_path.name == junit_name(state.backend, state.shard)
    except ValueError:
        return False


def wanted(state: RunState) -> bool:
    """A sidecar is written beside a conventional JUnit file or one of conformance tests."""
    return state.junit_path is not None and (is_conventional(state) or state.conformance_collected)


def process_facts(state: RunState) -> dict[str, Any]:
    """Facts only the process that ran the tests knows (torch is imported there)."""
    available, reason = availability(state.backend)
    return {
        "collected_ids": state.collected_ids,
        "selected_ids": state.selected_ids,
        "filtered_out": state.filtered_out,
        "conformance_collected": state.conformance_collected,
        "stale_expectations": state.stale_expectations,
        "available": available,
        "availability_reason": reason,
        "device": provenance.device_name(state.backend),
        "device_kind": device_kind(state.backend),
        "declaration": recorded_declaration(state.backend),
        "backend_provenance": backend_provenance(state.backend),
        "gpus": provenance.gpu_names(),
        "versions": provenance.package_versions(),
        "pinned": state.pinned,
        **provenance.torch_build(),
    }


def _process(state: RunState, *, finished: bool) -> dict[str, Any]:
    """The facts of the process that ran the tests: the first xdist worker that collected,
    else the controller once it finished (none before)."""
    worker_facts = [report for report in state.worker_reports if report.get("collected_ids")]
    if state.worker_reports:
        return worker_facts[0] if worker_facts else state.worker_reports[0]
    return process_facts(state) if finished else {}


def _machine(controller: MachineFacts, process: dict[str, Any]) -> MachineFacts:
    """The controller's machine facts, with those the process that ran the tests knows."""
    known = {key: process[key] for key in MACHINE_OVERRIDES if process.get(key) is not None}
    return replace(controller, **known)


def record(
    config: pytest.Config, state: RunState, *, finished: bool, exitstatus: int | None
) -> RunRecord:
    """The run's `RunRecord`."""
    process = _process(state, finished=finished)
    machine = _machine(provenance.machine_facts(state.backend, config.rootpath), process)
    session = SessionFacts(
        run_id=state.run_id,
        started=state.started,
        finished_at=now() if finished else None,
        args=[str(argument) for argument in config.invocation_params.args],
        xdist_workers=len(state.worker_reports),
        shard_algorithm=state.shard_algorithm,
        expectations_file=relative(state.expectations_file, config.rootpath),
        expectations_sha256=expectations_sha256(state.expectations_file),
        devices=provenance.run_devices(
            (report.get("device") for report in state.worker_reports), machine.device
        ),
        collected_ids=process.get("collected_ids"),
        selected_ids=process.get("selected_ids"),
        filtered_out=process.get("filtered_out"),
        conformance_collected=process.get("conformance_collected"),
        stale_expectations=process.get("stale_expectations"),
        available=process.get("available"),
        availability_reason=process.get("availability_reason"),
        declaration=process.get("declaration"),
        backend_provenance=process.get("backend_provenance"),
        gpus=process.get("gpus"),
        pinned=process.get("pinned"),
    )
    return RunRecord(
        backend=state.backend,
        junit=None if state.junit_path is None else state.junit_path.name,
        machine=machine,
        finished=finished,
        exitstatus=exitstatus,
        shard=None if state.shard is None else str(state.shard),
        selection=state.selection,
        selection_reason=state.selection_reason,
        device_kind=process.get("device_kind"),
        session=session,
    )


def write(config: pytest.Config, state: RunState, **kwargs: Any) -> None:
    """Write the sidecar atomically beside the JUnit file."""
    assert state.junit_path is not None
    write_sidecar(state.junit_path, record(config, state, **kwargs))


def stamp_junit_suite(config: pytest.Config, state: RunState) -> None:
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
    log_xml.add_global_property("selection", state.selection)
    log_xml.add_global_property("run_id", state.run_id)


def seal(state: RunState) -> None:
    """Add the sha256 of the finished JUnit file to this run's sidecar (if both exist)."""
    assert state.junit_path is not None
    seal_sidecar(state.junit_path, state.run_id)
