"""`run_signoff`: find, load, judge, merge and write, in that order."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.runs.atomic import atomic_write_bytes
from conformance.runs.expectations import (
    DEFAULT_EXPECTATIONS_DIR,
    Expectation,
    ExpectationFileError,
    expectations_path,
    load_expectations,
)
from conformance.runs.outputs import output_paths, remove_outputs
from conformance.signoff import machine
from conformance.signoff.baseline import load_baseline
from conformance.signoff.checks import (
    COLLECTION_FAILED,
    REQUIRED_NOT_RUN,
    STALE_EVIDENCE,
    UNJUDGEABLE_REPORTS,
    UNKNOWN_BACKEND,
    UNREADABLE_EXPECTATIONS,
)
from conformance.signoff.collect import collect_ids
from conformance.signoff.discovery import discover
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.issue import Issue
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
from conformance.signoff.provenance_warnings import provenance_warnings
from conformance.signoff.report_html import render_html
from conformance.signoff.report_json import backend_order, render_json, signoff_document
from conformance.signoff.report_md import render_markdown
from conformance.signoff.substitution import substitute_evidence
from conformance.signoff.verdict import evaluate_backend, overall_verdict
from conformance.targets import BUILTIN_TARGETS, engine_names


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
    expectations_dir: Path = DEFAULT_EXPECTATIONS_DIR  # a plug-in's files (--expectations-dir)
    repository_expectations: Path = DEFAULT_EXPECTATIONS_DIR  # the built-in targets' files
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


def expectations_of(backend: str, options: SignoffOptions, errors: list[str]) -> list[Expectation]:
    """The backend's expectation entries; an unreadable file is an error (SIGN018).

    A built-in target is always judged by the repository's file: ``--expectations-dir``
    gives the files of plug-ins only.
    """
    builtin = backend in BUILTIN_TARGETS
    directory = options.repository_expectations if builtin else options.expectations_dir
    try:
        return load_expectations(expectations_path(backend, directory))
    except ExpectationFileError as error:
        errors.append(UNREADABLE_EXPECTATIONS.issue(str(error)))
        return []


def blocking_reasons(results: Sequence[BackendResult], errors: Sequence[str]) -> list[str]:
    """Why the verdict is not PASS, one coded line each (a required backend not run: SIGN015)."""
    lines: list[str] = []
    for result in results:
        if result.status in (Status.FAIL, Status.INCOMPLETE):
            line = f"{result.backend}: {result.status.value}: {result.reason}"
            lines.append(Issue(result.code, line) if result.code else line)
        elif result.required and result.status in (Status.NOT_RUN, Status.STALE):
            what = "not run" if result.status == Status.NOT_RUN else "stale"
            line = f"{result.backend}: required but {what}: {result.reason}"
            check = REQUIRED_NOT_RUN if result.status == Status.NOT_RUN else STALE_EVIDENCE
            lines.append(check.issue(line))
    return lines + list(errors)


def judge(
    backend_input: BackendInput,
    options: SignoffOptions,
    *,
    expectations: list[Expectation],
    collected: list[str] | None,
) -> BackendResult:
    """`evaluate_backend`, turning an unforeseen error on hostile input into INCOMPLETE."""
    backend = backend_input.backend
    builtin = backend in BUILTIN_TARGETS
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
            declaration=options.backends.declaration(backend),
            repository_expectations=expectations_path(backend, options.repository_expectations)
            if builtin
            else None,
        )
    except (RecursionError, MemoryError, ValueError, TypeError, KeyError, AttributeError) as error:
        files = ", ".join(run.path.name for run in backend_input.runs) or "its reports"
        reason = UNJUDGEABLE_REPORTS.issue(
            f"{files} could not be judged ({type(error).__name__}: {error})"
        )
        return BackendResult(
            backend,
            Status.INCOMPLETE,
            False,
            reason,
            backend_input,
            [],
            None,
            [reason],
            [],
            [],
            code=reason.code,
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
    substitution = substitute_evidence(
        found.inputs,
        options.evidence_dir,
        known_backends=known,
        root=options.root,
        limit=options.max_bytes,
    )
    inputs = substitution.inputs
    errors = [*UNKNOWN_BACKEND.issues(found.errors), *substitution.errors]
    warnings = [*found.warnings, *substitution.warnings]
    if options.require:
        _required(options, {}, known)  # reject unknown names before any work
    explicit = set(options.require or ()) | (set(RELEASE_BACKENDS) if options.release else set())
    own = set(options.backends.registered()) - set(options.backends.plugins())
    shown = set(DEFAULT_BACKENDS) | own | set(inputs) | explicit
    results: dict[str, BackendResult] = {}
    for backend in backend_order(shown):
        backend_input = inputs.get(backend) or BackendInput(backend)
        collected = None
        # an engine's tests are collected by its own session (`conformance.ci.engine_junit`)
        collectable = backend not in engine_names()
        if options.collect_now and collectable and (backend_input.has_input or backend in explicit):
            try:
                collector = options.collector or (lambda name: collect_ids(name, root=options.root))
                collected = collector(backend)
            except SignoffInputError as error:
                errors.append(COLLECTION_FAILED.issue(str(error)))
        results[backend] = judge(
            backend_input,
            options,
            expectations=expectations_of(backend, options, errors),
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
    result = SignoffResult(
        verdict=overall_verdict(results.values(), errors),
        required=required,
        required_source=required_source,
        backends=results,
        errors=errors,
        warnings=warnings,
        blocking=blocking_reasons(list(results.values()), errors),
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        reports_dir=options.reports_dir,
        root=options.root,
        release=options.release,
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
