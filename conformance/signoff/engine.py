"""`run_signoff`: find, load, judge, merge and write, in that order."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.harness.expectations import (
    DEFAULT_EXPECTATIONS_DIR,
    Expectation,
    ExpectationFileError,
    expectations_path,
    load_expectations,
)
from conformance.signoff import machine
from conformance.signoff.atomic import atomic_write_bytes
from conformance.signoff.collect import collect_ids
from conformance.signoff.discovery import discover
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.evidence import find_evidence, load_evidence
from conformance.signoff.loading import MAX_JUNIT_BYTES
from conformance.signoff.merge import merged_junit
from conformance.signoff.model import (
    DEFAULT_BACKENDS,
    RELEASE_BACKENDS,
    BackendInput,
    BackendResult,
    SignoffResult,
    Status,
)
from conformance.signoff.report_html import render_html
from conformance.signoff.report_json import backend_order, render_json, signoff_document
from conformance.signoff.report_md import render_markdown
from conformance.signoff.verdict import evaluate_backend, overall_verdict

OUTPUT_NAMES: dict[str, str] = {
    "junit": "conformance.xml",
    "markdown": "signoff.md",
    "json": "signoff.json",
    "html": "signoff.html",
}


class SignoffUsageError(ValueError):
    """Options that cannot be honoured (an unknown backend in ``--require``)."""


@dataclass
class SignoffOptions:
    """What to sign off and how (the command-line options, as data)."""

    reports_dir: Path = Path("reports")
    junit_dir: Path | None = None  # default: <reports_dir>/junit
    require: Sequence[str] | None = None
    release: bool = False
    evidence_dir: Path | None = None  # None: no evidence
    collect: bool = False
    root: Path = field(default_factory=Path.cwd)
    expectations_dir: Path = DEFAULT_EXPECTATIONS_DIR
    write: bool = True
    max_bytes: int = MAX_JUNIT_BYTES
    collector: Callable[[str], list[str]] | None = None  # for --collect; default: pytest
    backends: machine.BackendView = field(default_factory=machine.RegistryView)

    @property
    def junit_path(self) -> Path:
        """The directory of per-run JUnit files."""
        return self.junit_dir if self.junit_dir is not None else self.reports_dir / "junit"


def _required(
    options: SignoffOptions, results: dict[str, BackendResult], known: set[str]
) -> tuple[list[str], str]:
    explicit = list(options.require or [])
    unknown = sorted(set(explicit) - known)
    if unknown:
        raise SignoffUsageError(
            f"--require names unknown backends {unknown}; known: {', '.join(sorted(known))}"
        )
    if options.release or explicit:
        names = list(dict.fromkeys([*(RELEASE_BACKENDS if options.release else ()), *explicit]))
        source = "release" if options.release and not explicit else "--require"
        if options.release and explicit:
            source = "release plus --require"
        return backend_order(names), source
    runnable = options.backends.runnable()
    if runnable is not None:
        return backend_order(runnable), "the backends this machine can run"
    ran = [name for name, result in results.items() if result.status != Status.NOT_RUN]
    return backend_order(ran), "the backends that ran (backends.registry cannot tell)"


def _expectations(backend: str, directory: Path, errors: list[str]) -> list[Expectation]:
    try:
        return load_expectations(expectations_path(backend, directory))
    except ExpectationFileError as error:
        errors.append(str(error))
        return []


def _blocking(results: Sequence[BackendResult], errors: Sequence[str]) -> list[str]:
    lines = []
    for result in results:
        if result.status in (Status.FAIL, Status.INCOMPLETE):
            lines.append(f"{result.backend}: {result.status.value}: {result.reason}")
        elif result.required and result.status == Status.NOT_RUN:
            lines.append(f"{result.backend}: required but not run: {result.reason}")
    return lines + list(errors)


def run_signoff(options: SignoffOptions) -> SignoffResult:
    """Sign off the reports under ``options.reports_dir``; write the reports unless told not."""
    known = machine.known_backends(options.backends, options.expectations_dir)
    found = discover(options.junit_path, known_backends=known, limit=options.max_bytes)
    errors, warnings = list(found.errors), list(found.warnings)
    inputs = {name: found_input for name, found_input in found.inputs.items()}
    if options.evidence_dir is not None:
        index = find_evidence(options.evidence_dir, known_backends=known)
        errors += index.errors
        warnings += index.warnings
        warnings += [
            f"{old.path}: older than a newer evidence directory; not used" for old in index.older
        ]
        for backend, evidence in index.newest.items():
            if backend in inputs and inputs[backend].has_input:
                warnings.append(f"{evidence.path}: not used, {backend} has reports of its own")
                continue
            inputs[backend] = load_evidence(evidence, known_backends=known, limit=options.max_bytes)
    if options.require:
        _required(options, {}, known)  # reject unknown names before any work
    explicit = set(options.require or ()) | (set(RELEASE_BACKENDS) if options.release else set())
    shown = set(DEFAULT_BACKENDS) | set(options.backends.registered()) | set(inputs) | explicit
    results: dict[str, BackendResult] = {}
    for backend in backend_order(shown):
        backend_input = inputs.get(backend) or BackendInput(backend)
        collected = None
        if options.collect and (backend_input.has_input or backend in explicit):
            try:
                collector = options.collector or (lambda name: collect_ids(name, root=options.root))
                collected = collector(backend)
            except SignoffInputError as error:
                errors.append(str(error))
        results[backend] = evaluate_backend(
            backend_input,
            required=False,  # decided below, once every backend's status is known
            expectations=_expectations(backend, options.expectations_dir, errors),
            collected=collected,
            availability_reason=None
            if backend_input.has_input
            else options.backends.unavailable_reason(backend),
        )
    required, required_source = _required(options, results, known)
    for name in required:
        if name not in results:
            results[name] = evaluate_backend(
                BackendInput(name),
                required=True,
                expectations=[],
                availability_reason=options.backends.unavailable_reason(name),
            )
        results[name].required = True
    verdict = overall_verdict(results.values(), errors)
    result = SignoffResult(
        verdict=verdict,
        required=required,
        required_source=required_source,
        backends=results,
        errors=errors,
        warnings=warnings,
        blocking=_blocking(list(results.values()), errors),
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        reports_dir=options.reports_dir,
    )
    if options.write:
        write_outputs(result)
    return result


def write_outputs(result: SignoffResult) -> None:
    """Write the merged JUnit and the three reports, each atomically, all rendered first."""
    document = signoff_document(result)
    payloads: dict[str, bytes] = {
        "junit": merged_junit(list(result.backends.values()), errors=result.errors),
        "markdown": render_markdown(document).encode("utf-8"),
        "json": render_json(document).encode("utf-8"),
        "html": render_html(document).encode("utf-8"),
    }
    outputs = {name: result.reports_dir / OUTPUT_NAMES[name] for name in payloads}
    for name, payload in payloads.items():
        atomic_write_bytes(outputs[name], payload)
    result.outputs = outputs
