"""Finding the report files of a directory and grouping them by backend."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from conformance.harness.sharding import parse_junit_name, sidecar_path
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.loading import MAX_JUNIT_BYTES, load_run, load_sidecar
from conformance.signoff.model import BackendInput

SIDECAR_SUFFIX = ".meta.json"


@dataclass
class Discovered:
    """The backends found in one directory, and the files that belong to none."""

    inputs: dict[str, BackendInput] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    not_installed: dict[str, list[Path]] = field(default_factory=dict)  # plug-in runs, unjudged


def _backend_of(path: Path, *, known_backends: Collection[str]) -> str:
    junit_file_name = path.name.removesuffix(SIDECAR_SUFFIX)
    if junit_file_name != path.name:
        junit_file_name += ".xml"
    try:
        backend, _ = parse_junit_name(junit_file_name)
    except ValueError as error:
        raise SignoffInputError(path, f"{error}; the file is not used") from None
    if backend not in known_backends:
        raise SignoffInputError(
            path,
            f"backend {backend!r} is unknown (known: {', '.join(sorted(known_backends))}); "
            f"its results are not counted (a plug-in backend? install it where the sign-off "
            f"runs: MLA_CONFORMANCE_PLUGINS, docs/plugins.md)",
        )
    return backend


def _run_of_backend_not_installed(path: Path) -> str | None:
    """The backend of a conformance run whose backend is not installed here, else None.

    Such a run (a plug-in's, tried once) has a sidecar in the run format naming its backend:
    the file itself, or the one beside the JUnit file. A file without one stays an error.
    """
    companion = path if path.name.endswith(SIDECAR_SUFFIX) else sidecar_path(path)
    junit_file_name = companion.name.removesuffix(SIDECAR_SUFFIX) + ".xml"
    try:
        backend, _ = parse_junit_name(junit_file_name)
        document = load_sidecar(companion)
    except (ValueError, SignoffInputError):
        return None
    return backend if document.get("backend") == backend else None


def discover(
    directory: Path,
    *,
    known_backends: Collection[str],
    limit: int = MAX_JUNIT_BYTES,
) -> Discovered:
    """Load every ``*.xml`` and ``*.meta.json`` of ``directory`` (not recursive).

    A file that cannot be used becomes a problem of its backend (naming the file) or, when it
    belongs to no known backend, a sign-off error; it never stops the other files loading.
    """
    found = Discovered()
    if not directory.is_dir():
        return found
    entries = sorted(directory.iterdir())
    junit_files = [path for path in entries if path.name.endswith(".xml")]
    sidecars = [path for path in entries if path.name.endswith(SIDECAR_SUFFIX)]
    for path in entries:
        if path not in junit_files and path not in sidecars and not path.name.startswith("."):
            found.warnings.append(f"{path}: not a JUnit report or sidecar; ignored")

    def backend_input(path: Path) -> BackendInput | None:
        try:
            backend = _backend_of(path, known_backends=known_backends)
        except SignoffInputError as error:
            foreign = _run_of_backend_not_installed(path)
            if foreign is not None and foreign not in known_backends:
                found.not_installed.setdefault(foreign, []).append(path)
            else:
                found.errors.append(str(error))
            return None
        return found.inputs.setdefault(backend, BackendInput(backend))

    for path in junit_files:
        target = backend_input(path)
        if target is None:
            continue
        backend = target.backend
        _, shard = parse_junit_name(path.name)
        companion = sidecar_path(path)
        sidecar = None
        if companion.exists():
            try:
                sidecar = load_sidecar(companion)
            except SignoffInputError as error:
                target.problems.append(str(error))
        try:
            run = load_run(
                path,
                backend=backend,
                shard=shard,
                sidecar=sidecar,
                sidecar_path=companion if sidecar is not None else None,
                limit=limit,
            )
        except SignoffInputError as error:
            target.problems.append(str(error))
            target.broken_files.append(path)
            continue
        target.runs.append(run)
    for path in sidecars:
        junit_path = path.with_name(path.name.removesuffix(SIDECAR_SUFFIX) + ".xml")
        target = None if junit_path.exists() else backend_input(path)
        if target is None:
            continue
        target.orphan_sidecars.append(path)
        try:
            target.orphan_documents[path] = load_sidecar(path)
        except SignoffInputError as error:
            target.problems.append(str(error))
    return found
