"""The committed facts of every release the engine target drives, and the choice among them.

The release matrix (``nox -s vllm_matrix``) writes one facts file per release into
``reports/engines/`` (``vllm-<version>.facts.json``) and a ``SHA256SUMS`` manifest beside them
(``sha256sum`` format: ``<hex>  <file name>``). ``python -m conformance audit TREE --facts DIR``
picks the file of the tree's release from such a folder (`choose_facts`); a folder without the
tree's release, or a tree whose release is unknown, is said in one line and the tree is judged
by the static rules alone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from conformance.engines.facts import FactsError

FACTS_DIR = Path("reports") / "engines"
MANIFEST = "SHA256SUMS"
_FACTS_NAME = re.compile(r"^(?P<engine>[a-z0-9_]+)-(?P<version>[0-9][^/]*)\.facts\.json$")


@dataclass(frozen=True)
class Choice:
    """The facts file chosen for a tree (None: none), and the note that says why not."""

    path: Path | None
    note: str = ""


def facts_name(engine: str, version: str) -> str:
    """``vllm-0.33.0.facts.json``."""
    return f"{engine}-{version}.facts.json"


def measured_versions(folder: Path, engine: str) -> list[str]:
    """The releases of `engine` with a facts file in `folder`, oldest first."""
    found = []
    for path in folder.glob(f"{engine}-*.facts.json"):
        match = _FACTS_NAME.match(path.name)
        if match and match.group("engine") == engine:
            found.append(match.group("version"))
    return sorted(found, key=_key)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+-]", version))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(folder: Path) -> dict[str, str]:
    """``{file name: sha256}`` of the folder's manifest; a malformed line is one-line error."""
    path = folder / MANIFEST
    table: dict[str, str] = {}
    if not path.is_file():
        return table
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        match = re.fullmatch(r"([0-9a-f]{64}) [ *]?(\S+)", line.strip())
        if match is None:
            raise FactsError(f"{path}:{number}: expected '<sha256>  <file name>'")
        table[match.group(2)] = match.group(1)
    return table


def write_manifest(folder: Path, names: Iterable[str]) -> Path:
    """(Re)write the manifest over the facts files `names` (and those it already lists)."""
    table = read_manifest(folder)
    for name in names:
        table[name] = sha256(folder / name)
    table = {name: digest for name, digest in table.items() if (folder / name).is_file()}
    path = folder / MANIFEST
    body = "".join(f"{table[name]}  {name}\n" for name in sorted(table))
    path.write_text(body, encoding="utf-8")
    return path


def manifest_problems(folder: Path) -> list[str]:
    """Facts files the manifest does not list or whose checksum differs (empty: all match)."""
    table = read_manifest(folder)
    problems = []
    for path in sorted(folder.glob("*.facts.json")):
        expected = table.get(path.name)
        if expected is None:
            problems.append(f"{path}: not listed in {folder / MANIFEST}")
        elif sha256(path) != expected:
            problems.append(f"{path}: sha256 differs from {folder / MANIFEST}")
    return problems


def choose_facts(folder: Path, engine: str, version: str | None, where: str = "") -> Choice:
    """The facts file of `engine` `version` in `folder`, checked against its manifest."""
    versions = measured_versions(folder, engine)
    have = ", ".join(versions) or "none"
    if version is None:
        return Choice(
            None,
            f"the tree's {engine} version is unknown, so no facts of {folder} apply "
            f"(measured there: {have}); judged by the static rules",
        )
    path = folder / facts_name(engine, version)
    if not path.is_file():
        return Choice(
            None,
            f"no facts for {engine} {version} ({where or 'the tree'}) in {folder} (measured "
            f"there: {have}); judged by the static rules; measure them: nox -s {engine} -- "
            f"--{engine}-version {version}",
        )
    table = read_manifest(folder)
    if table and path.name not in table:
        raise FactsError(f"{path}: not listed in {folder / MANIFEST}")
    if table and table[path.name] != sha256(path):
        raise FactsError(f"{path}: sha256 differs from {folder / MANIFEST}")
    return Choice(path)
