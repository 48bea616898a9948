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
from conformance.signoff.baseline import load_baseline
from conformance.signoff.collect import collect_ids
from conformance.signoff.discovery import discover
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.evidence import evidence_staleness, find_evidence, load_evidence
from conformance.signoff.loading import MAX_JUNIT_BYTES
from conformance.signoff.merge import merged_junit
from conformance.signoff.model import (
    DEFAULT_BACKENDS,
    RELEASE_BACKENDS,
    BackendInput,
    BackendResult,
    Outcome,
    SignoffResult,
    Status,
)
from conformance.signoff.outputs import output_paths, remove_outputs
from conformance.signoff.provenance_warnings import provenance_warnings
from conformance.signoff.report_html import render_html
from conformance.signoff.report_json import backend_order, render_json, signoff_document
from conformance.signoff.report_md import render_markdown
from conformance.signoff.verdict import evaluate_backend, overall_verdict


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
    no_collect: bool = False  # a release collects unless told not to
    baseline: Path | None = None  # an earlier signoff.json to compare with
    root: Path = field(default_factory=Path.cwd)
    expectations_dir: Path = DEFAULT_EXPECTATIONS_DIR
    write: bool = True
    max_bytes: int = MAX_JUNIT_BYTES
    collector: Callable[[str], list[str]] | None = None  # for --collect; default: pytest
    backends: machine.BackendView = field(default_factory=machine.RegistryView)

    @property
    def collect_now(self) -> bool:
        """Recompute the expected ids by collection (``--collect``, or a release)."""
        return self.collect or (self.release and not self.no_collect)

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
        plugins = set(options.backends.plugins())  # required only when named: --require
        own = [name for name in runnable if name not in plugins]
        return backend_order(own), "the suite's backends this machine can run"
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
        elif result.required and result.status in (Status.NOT_RUN, Status.STALE):
            what = "not run" if result.status == Status.NOT_RUN else "stale"
            lines.append(f"{result.backend}: required but {what}: {result.reason}")
    return lines + list(errors)


def _all_skipped(backend_input: BackendInput) -> bool:
    """A local report that ran nothing (every test skipped): it never shadows evidence."""
    cases = [case for run in backend_input.runs for case in run.cases]
    return (
        bool(cases)
        and not backend_input.problems
        and all(case.outcome == Outcome.SKIPPED for case in cases)
    )


def _judge(
    backend_input: BackendInput,
    options: SignoffOptions,
    *,
    expectations: list[Expectation],
    collected: list[str] | None,
) -> BackendResult:
    """`evaluate_backend`, turning an unforeseen error on hostile input into INCOMPLETE."""
    backend = backend_input.backend
    try:
        return evaluate_backend(
            backend_input,
            required=False,  # decided later, once every backend's status is known
            expectations=expectations,
            collected=collected,
            availability_reason=None
            if backend_input.has_input
            else options.backends.unavailable_reason(backend),
            expected_kind=options.backends.device_kind(backend),
        )
    except (RecursionError, MemoryError, ValueError, TypeError, KeyError, AttributeError) as error:
        files = ", ".join(run.path.name for run in backend_input.runs) or "its reports"
        reason = f"{files} could not be judged ({type(error).__name__}: {error})"
        return BackendResult(
            backend, Status.INCOMPLETE, False, reason, backend_input, [], None, [reason], [], []
        )


def _not_installed(backend: str, paths: Sequence[Path]) -> BackendResult:
    """The run of a backend not installed here (a plug-in tried once): shown, not judged."""
    files = ", ".join(path.name for path in paths)
    reason = (
        f"{files}: a run of backend {backend!r}, which is not installed where the sign-off "
        "runs; not judged (install the plug-in with MLA_CONFORMANCE_PLUGINS to judge it, "
        "docs/plugins.md)"
    )
    return evaluate_backend(
        BackendInput(backend), required=False, expectations=[], availability_reason=reason
    )


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
            local = inputs.get(backend)
            if local is not None and local.has_input and not _all_skipped(local):
                warnings.append(f"{evidence.path}: not used, {backend} has reports of its own")
                continue
            loaded = load_evidence(evidence, known_backends=known, limit=options.max_bytes)
            loaded.stale = evidence_staleness(loaded, root=options.root)
            if local is not None and local.has_input:
                loaded.shadowed = [run.path.name for run in local.runs]
                warnings.append(
                    f"{backend}: every test of the local {', '.join(loaded.shadowed)} was "
                    f"skipped; the evidence of {evidence.date} stands in for it"
                )
            inputs[backend] = loaded
    if options.require:
        _required(options, {}, known)  # reject unknown names before any work
    explicit = set(options.require or ()) | (set(RELEASE_BACKENDS) if options.release else set())
    own = set(options.backends.registered()) - set(options.backends.plugins())
    shown = set(DEFAULT_BACKENDS) | own | set(inputs) | explicit
    results: dict[str, BackendResult] = {}
    for backend in backend_order(shown):
        backend_input = inputs.get(backend) or BackendInput(backend)
        collected = None
        if options.collect_now and (backend_input.has_input or backend in explicit):
            try:
                collector = options.collector or (lambda name: collect_ids(name, root=options.root))
                collected = collector(backend)
            except SignoffInputError as error:
                errors.append(str(error))
        results[backend] = _judge(
            backend_input,
            options,
            expectations=_expectations(backend, options.expectations_dir, errors),
            collected=collected,
        )
        results[backend].warnings += provenance_warnings(backend_input)
    for backend, paths in found.not_installed.items():
        results[backend] = _not_installed(backend, paths)
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
        root=options.root,
    )
    if options.baseline is not None:
        result.baseline = load_baseline(options.baseline)
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
    outputs = output_paths(result.reports_dir)
    try:
        for name, payload in payloads.items():
            atomic_write_bytes(outputs[name], payload)
    except BaseException:
        remove_outputs(result.reports_dir)  # never a new verdict beside an old one
        raise
    result.outputs = outputs
