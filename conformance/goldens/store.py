"""Golden files on disk: safetensors data plus a JSON manifest with checksums and provenance.

Layout of a golden directory (default ``tests/goldens``, or ``$MLA_CONFORMANCE_GOLDENS``)::

    manifest.json          {"format", "generator", "cases": {id: entry}}
    <case id>.safetensors  tensors + one metadata key, "golden" (JSON)

A manifest entry records the file name, its sha256 and size, the case parameters and the
provenance of its generation (generator version, planner, features, measured errors).
Nothing is ever unpickled: tensors go through safetensors, everything else through JSON.

fp8 tensors are stored as their raw bytes (uint8) with the fp8 dtype named in the
metadata (``"fp8_views"``): native float8 support in safetensors is recent and not every
reader knows e4m3fnuz, while raw bytes round-trip bit for bit everywhere (NaN included).
The metadata holds a single key so that the bytes of a file are deterministic
(safetensors writes its metadata map in arbitrary order).

Every error is a `GoldenError` whose message starts with the offending path.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from conformance.errors import ConformanceError

GOLDENS_ENV = "MLA_CONFORMANCE_GOLDENS"
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "tests" / "goldens"
MANIFEST_NAME = "manifest.json"
FILE_SUFFIX = ".safetensors"
FORMAT_VERSION = 1
META_KEY = "golden"
FP8_VIEWS_KEY = "fp8_views"

_FP8_BY_NAME: dict[str, torch.dtype] = {
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz,
}


class GoldenError(ConformanceError):
    """A golden file or manifest is missing, corrupted, stale or malformed."""

    def __init__(self, path: Path | str, message: str) -> None:
        self.path = Path(path)
        self.detail = message
        super().__init__(f"{path}: {message}")


def default_root() -> Path:
    """The golden directory: ``$MLA_CONFORMANCE_GOLDENS`` if set, else ``tests/goldens``."""
    env = os.environ.get(GOLDENS_ENV)
    return Path(env) if env else DEFAULT_ROOT


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def fp8_dtype_named(name: str) -> torch.dtype:
    """The e4m3 dtype called `name` (``float8_e4m3fn`` or ``float8_e4m3fnuz``)."""
    try:
        return _FP8_BY_NAME[name.removeprefix("torch.")]
    except KeyError:
        raise ValueError(
            f"fp8 dtype: expected one of {sorted(_FP8_BY_NAME)}, found {name!r}"
        ) from None


# --------------------------------------------------------------------------------------
# One file: tensors + metadata <-> bytes


def serialize(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> bytes:
    """Deterministic safetensors bytes of `tensors` (fp8 as raw bytes) and `meta` (JSON)."""
    stored: dict[str, torch.Tensor] = {}
    views: dict[str, str] = {}
    for name, tensor in tensors.items():
        t = tensor.detach().to("cpu").contiguous()
        if t.dtype in _FP8_BY_NAME.values():
            views[name] = str(t.dtype).removeprefix("torch.")
            t = t.view(torch.uint8)
        stored[name] = t
    if FP8_VIEWS_KEY in meta:
        raise ValueError(f"meta: {FP8_VIEWS_KEY!r} is reserved")
    text = json.dumps({**meta, FP8_VIEWS_KEY: views}, sort_keys=True, allow_nan=False)
    return st_save(stored, metadata={META_KEY: text})


def deserialize(data: bytes, *, path: Path | str) -> tuple[dict[str, torch.Tensor], dict]:
    """Inverse of `serialize`; malformed data raises `GoldenError` naming `path`."""
    if len(data) < 8 or data[8:9] != b"{":
        raise GoldenError(path, "not a safetensors file (no JSON header after 8 length bytes)")
    try:
        tensors = st_load(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise GoldenError(path, f"unreadable safetensors data: {exc}") from None
    header_len = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + header_len])
        meta = json.loads(header["__metadata__"][META_KEY])
    except (KeyError, TypeError, ValueError) as exc:
        raise GoldenError(path, f"metadata: expected a JSON {META_KEY!r} entry ({exc})") from None
    if not isinstance(meta, dict):
        raise GoldenError(path, f"metadata: expected a JSON object, found {type(meta).__name__}")
    views = meta.pop(FP8_VIEWS_KEY, {})
    for name, dtype_name in views.items():
        if name not in tensors or tensors[name].dtype != torch.uint8:
            raise GoldenError(path, f"metadata: fp8 view {name!r} names no uint8 tensor")
        try:
            tensors[name] = tensors[name].view(fp8_dtype_named(dtype_name))
        except ValueError as exc:
            raise GoldenError(path, f"tensor {name!r}: {exc}") from None
    return tensors, meta


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; goldens are ordinary repository files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------
# The manifest


@dataclass(frozen=True)
class ManifestEntry:
    """One golden file: its name, checksum, size, case parameters and provenance."""

    case_id: str
    file: str
    sha256: str
    size: int
    case: dict[str, Any]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form: every field but the id (the key it is stored under)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "case_id"}


@dataclass(frozen=True)
class Manifest:
    """The golden set: generator provenance and the entries, in case-table order."""

    generator: dict[str, Any]
    entries: dict[str, ManifestEntry]
    format: int = FORMAT_VERSION

    def to_json_text(self) -> str:
        """The manifest file's text (stable key order, trailing newline)."""
        data = {
            "format": self.format,
            "generator": self.generator,
            "cases": {cid: e.to_json() for cid, e in self.entries.items()},
        }
        return json.dumps(data, indent=2, allow_nan=False) + "\n"

    @classmethod
    def parse(cls, text: str, *, path: Path) -> Manifest:
        """Parse a manifest file's text; errors name `path` and the bad entry."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise GoldenError(path, f"not valid JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise GoldenError(path, f"format: expected {FORMAT_VERSION}, found {found!r}")
        cases = data.get("cases")
        if not isinstance(cases, dict):
            raise GoldenError(path, "cases: expected an object of case id -> entry")
        entries = {}
        for case_id, raw in cases.items():
            try:
                entries[case_id] = ManifestEntry(
                    case_id=case_id,
                    file=str(raw["file"]),
                    sha256=str(raw["sha256"]),
                    size=int(raw["size"]),
                    case=dict(raw["case"]),
                    provenance=dict(raw.get("provenance", {})),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise GoldenError(path, f"cases[{case_id!r}]: malformed entry ({exc!r})") from None
            if Path(entries[case_id].file).name != entries[case_id].file:
                raise GoldenError(
                    path, f"cases[{case_id!r}]: file {raw['file']!r} is not a plain file name"
                )
        return cls(generator=dict(data.get("generator", {})), entries=entries)


# --------------------------------------------------------------------------------------
# The store


@dataclass(frozen=True)
class StoredGolden:
    """The raw content of one verified golden file."""

    case_id: str
    path: Path
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any]
    entry: ManifestEntry


class GoldenStore:
    """A golden directory: read the manifest, load verified files, write new ones."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def __repr__(self) -> str:
        return f"GoldenStore({str(self.root)!r})"

    @property
    def manifest_path(self) -> Path:
        """Where the manifest lives."""
        return self.root / MANIFEST_NAME

    def path_of(self, case_id: str) -> Path:
        """The data file of `case_id` (whether or not it exists)."""
        return self.root / f"{case_id}{FILE_SUFFIX}"

    def read_manifest(self) -> Manifest:
        """The parsed manifest; a missing or malformed one raises `GoldenError`."""
        path = self.manifest_path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise GoldenError(
                path, "no golden manifest; generate the goldens with `nox -s goldens`"
            ) from None
        return Manifest.parse(text, path=path)

    def entry(self, case_id: str) -> ManifestEntry:
        """The manifest entry of `case_id`."""
        entries = self.read_manifest().entries
        if case_id not in entries:
            raise GoldenError(
                self.manifest_path,
                f"no case {case_id!r} (cases: {', '.join(entries) or 'none'})",
            )
        return entries[case_id]

    def _checked_bytes(self, entry: ManifestEntry) -> tuple[Path, bytes]:
        path = self.root / entry.file
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise GoldenError(path, f"missing golden file of case {entry.case_id!r}") from None
        digest = sha256_bytes(data)
        if digest != entry.sha256:
            raise GoldenError(
                path,
                f"sha256 {digest} does not match the manifest's {entry.sha256} "
                f"({len(data)} bytes, manifest says {entry.size}): the golden file was "
                f"changed or corrupted; regenerate with `nox -s goldens` if the change is "
                f"intended",
            )
        return path, data

    def load(self, case_id: str) -> StoredGolden:
        """Read `case_id`, verifying its sha256 against the manifest first."""
        entry = self.entry(case_id)
        path, data = self._checked_bytes(entry)
        tensors, meta = deserialize(data, path=path)
        return StoredGolden(case_id, path, tensors, meta, entry)

    def verify(self) -> list[GoldenError]:
        """Every problem of the set: bad manifest, missing, changed or unlisted files."""
        try:
            manifest = self.read_manifest()
        except GoldenError as exc:
            return [exc]
        problems: list[GoldenError] = []
        for entry in manifest.entries.values():
            try:
                path, data = self._checked_bytes(entry)
                deserialize(data, path=path)
            except GoldenError as exc:
                problems.append(exc)
        listed = {e.file for e in manifest.entries.values()}
        for path in sorted(self.root.glob(f"*{FILE_SUFFIX}")):
            if path.name not in listed:
                problems.append(
                    GoldenError(path, "golden file not listed in the manifest (stale or stray)")
                )
        return problems

    def write(
        self,
        case_id: str,
        tensors: Mapping[str, torch.Tensor],
        meta: Mapping[str, Any],
        *,
        case: Mapping[str, Any],
        provenance: Mapping[str, Any],
    ) -> ManifestEntry:
        """Write one golden file atomically; returns its manifest entry (not yet saved)."""
        data = serialize(tensors, meta)
        path = self.path_of(case_id)
        write_atomic(path, data)
        return ManifestEntry(
            case_id=case_id,
            file=path.name,
            sha256=sha256_bytes(data),
            size=len(data),
            case=dict(case),
            provenance=dict(provenance),
        )

    def write_manifest(self, manifest: Manifest) -> None:
        """Write the manifest atomically."""
        write_atomic(self.manifest_path, manifest.to_json_text().encode("utf-8"))

    def remove(self, file_names: Iterable[str]) -> None:
        """Delete data files (cases that left the table)."""
        for name in file_names:
            (self.root / name).unlink(missing_ok=True)
