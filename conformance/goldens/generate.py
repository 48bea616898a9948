"""Writing, checking and reporting the golden set (``python -m conformance.goldens``).

Every golden is built and checked (`conformance.goldens.build`) before anything is written;
``generate`` prints which cases were added, removed or changed, ``--check`` regenerates
into a temporary directory and reports differences from the committed set.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from conformance.goldens.build import GENERATOR_VERSION, GenerationError, GoldenData, build_golden
from conformance.goldens.cases import GoldenCase, case_table
from conformance.goldens.changes import describe_changes
from conformance.goldens.store import (
    GoldenError,
    GoldenStore,
    Manifest,
    ManifestEntry,
    deserialize,
    serialize,
    sha256_bytes,
)

__all__ = ["GenerationError", "GoldenData", "build_golden", "describe_changes", "generate"]


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def generator_provenance() -> dict[str, Any]:
    """The manifest's generator record (environment versions are informational)."""
    return {
        "name": "conformance.goldens",
        "version": GENERATOR_VERSION,
        "planner": "conformance.persistent.plan_persistent_decode (AITER v1.2 serial)",
        "result": "kernels.plan_exec.execute_plan (fp32, AITER fp8 semantics)",
        "checked_against": "kernels.reference.mla_decode_reference (fp64)",
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "safetensors": _package_version("safetensors"),
    }


@dataclass
class SetReport:
    """What a generate or check run found, case by case."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        """True when anything was added, removed or changed."""
        return bool(self.added or self.removed or self.changed)

    def lines(self) -> list[str]:
        """Human-readable report lines."""
        out = [f"  added    {cid}" for cid in self.added]
        out += [f"  removed  {cid}" for cid in self.removed]
        for cid, details in self.changed.items():
            out.append(f"  changed  {cid}")
            out += [f"           {d}" for d in details]
        out.append(f"  unchanged: {len(self.unchanged)} case(s)")
        return out


@dataclass(frozen=True)
class _OldFile:
    """A stored golden read without its checksum check (for reporting changes)."""

    data: bytes | None = None
    content: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None
    error: str = ""


def _read_old(store: GoldenStore, entry: ManifestEntry | None, case_id: str) -> _OldFile:
    path = store.root / entry.file if entry else store.path_of(case_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return _OldFile(error=f"{path}: missing")
    try:
        return _OldFile(data=data, content=deserialize(data, path=path))
    except GoldenError as exc:
        return _OldFile(data=data, error=f"old file unreadable: {exc}")


def _compare(old: _OldFile, new_bytes: bytes, new_content: tuple) -> list[str] | None:
    """None when `old` holds `new_bytes` or the same content to fp32 rounding; else the change."""
    if old.content is None:
        return [old.error]
    if old.data == new_bytes:
        return None
    return describe_changes(old.content, new_content) or None


def _select(only: Sequence[str] | None) -> list[GoldenCase]:
    table = case_table()
    if not only:
        return list(table.values())
    unknown = [cid for cid in only if cid not in table]
    if unknown:
        raise GenerationError(f"--only: unknown case id(s) {unknown}; known: {', '.join(table)}")
    return [table[cid] for cid in table if cid in only]


def write_set(
    store: GoldenStore,
    cases: Sequence[GoldenCase],
    *,
    full: bool,
    progress: Callable[[str], None] | None = None,
) -> SetReport:
    """Generate `cases` into `store`, update its manifest, and report against its old content.

    `progress`, when given, gets one line per case as it is built.

    Every golden is built and checked before anything is written, so a refused golden
    leaves the store as it was. With `full` the set becomes exactly the case table (files
    of removed cases are deleted); otherwise the other cases' entries are kept as they are.
    """
    try:
        old_entries = store.read_manifest().entries
    except GoldenError:
        old_entries = {}
    built: dict[str, GoldenData] = {}
    for case in cases:
        if progress is not None:
            progress(f"  generating {case.id}")
        built[case.id] = build_golden(case)
    report = SetReport()
    entries: dict[str, ManifestEntry] = {}
    for case_id in case_table():
        golden = built.get(case_id)
        if golden is None:
            if case_id in old_entries:
                entries[case_id] = old_entries[case_id]
            continue
        old = _read_old(store, old_entries.get(case_id), case_id)
        new_bytes = serialize(golden.tensors, golden.meta)
        if case_id in old_entries and old.data is not None:
            if _compare(old, new_bytes, (golden.tensors, golden.meta)) is None:
                entries[case_id] = old_entries[case_id]  # keep the committed bytes
                report.unchanged.append(case_id)
                continue
        entries[case_id] = store.write(
            case_id,
            golden.tensors,
            golden.meta,
            case=golden.case.to_json(),
            provenance=golden.provenance,
        )
        if case_id not in old_entries and old.data is None:
            report.added.append(case_id)
            continue
        change = _compare(old, new_bytes, (golden.tensors, golden.meta))
        if change is None:
            report.unchanged.append(case_id)
        else:
            report.changed[case_id] = change
    if full:
        gone = [cid for cid in old_entries if cid not in entries]
        store.remove(old_entries[cid].file for cid in gone)
        report.removed.extend(gone)
    store.write_manifest(Manifest(generator=generator_provenance(), entries=entries))
    return report


def check_set(
    store: GoldenStore, cases: Sequence[GoldenCase], *, full: bool, echo: Callable[[str], None]
) -> SetReport:
    """Regenerate `cases` into a temporary directory and compare them with `store`.

    Prints no line per case: the report's summary says what was found.
    """
    report = SetReport()
    try:
        committed = store.read_manifest().entries
    except GoldenError as exc:
        committed = {}
        echo(f"  {exc}")
    with tempfile.TemporaryDirectory() as tmp:
        fresh_store = GoldenStore(tmp)
        fresh = write_set(fresh_store, cases, full=True).added
        fresh_entries = fresh_store.read_manifest().entries
        for case_id in fresh:
            new_entry = fresh_entries[case_id]
            new_bytes = (fresh_store.root / new_entry.file).read_bytes()
            old_entry = committed.get(case_id)
            if old_entry is None:
                report.added.append(case_id)
                continue
            old = _read_old(store, old_entry, case_id)
            if old.data is not None and sha256_bytes(old.data) != old_entry.sha256:
                path = store.root / old_entry.file
                change: list[str] | None = [f"{path}: sha256 differs from the manifest's"]
            else:
                change = _compare(old, new_bytes, deserialize(new_bytes, path=tmp))
            if change is None and old_entry.case != new_entry.case:
                change = ["manifest: case parameters differ"]
            if change is None:
                report.unchanged.append(case_id)
            else:
                report.changed[case_id] = change
    if full:
        report.removed.extend(cid for cid in committed if cid not in case_table())
        listed = {e.file for e in committed.values()}
        stray = sorted(p.name for p in store.root.glob("*.safetensors") if p.name not in listed)
        report.removed.extend(f"{name} (file not in the manifest)" for name in stray)
    return report


def generate(
    root: Path | str | None = None,
    *,
    only: Sequence[str] | None = None,
    check: bool = False,
    echo: Callable[[str], None] = print,
) -> int:
    """Regenerate (or, with `check`, verify) the golden set; returns an exit status.

    0: written (or, with `check`, identical); 1: `check` found differences, or a golden
    failed its checks (nothing is written for it).
    """
    store = GoldenStore(root)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # fixed reduction order: byte-stable output on one machine
    try:
        cases = _select(only)
        mode = "checking" if check else "generating"
        echo(f"goldens: {mode} {len(cases)} case(s) in {store.root}")
        if check:
            report = check_set(store, cases, full=not only, echo=echo)
        else:
            report = write_set(store, cases, full=not only, progress=echo)
    except GenerationError as exc:
        echo(f"goldens: FAILED: {exc}")
        return 1
    finally:
        torch.set_num_threads(threads)
    for line in report.lines():
        echo(line)
    if check and report.differs:
        echo("goldens: the committed goldens differ from a fresh generation (see above)")
        return 1
    echo("goldens: ok" if check else f"goldens: manifest written to {store.manifest_path}")
    return 0
