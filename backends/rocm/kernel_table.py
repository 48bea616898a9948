"""The MLA kernel table of the installed AITER, and the copies the suite vendors.

AITER ships ``hsa/<arch>/mla/mla_asm.csv`` next to its kernels, under ``AITER_ASM_DIR``
(``aiter.jit.core.AITER_ASM_DIR``, which AITER also exports to the environment). The backend
reads the table of the device's arch from there, never a copy: which kernels exist is a fact
of the installed AITER. ``tables/hsa/<arch>/mla/mla_asm.csv`` are copies of AITER's tables at
the commit ``tables/MANIFEST.json`` names (refreshed by ``scripts/refresh_aiter_tables.py``);
the selftests' AITER stand-in ships them as its own.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path

from conformance.aiter_kernels import KernelTable, parse_table

TABLES = Path(__file__).with_name("tables")
VENDORED_ASM_DIR = TABLES / "hsa"
MANIFEST = TABLES / "MANIFEST.json"
ASM_DIR_ENV = "AITER_ASM_DIR"


def table_path(asm_dir: Path | str, arch: str) -> Path:
    """Where AITER keeps the MLA kernel table of `arch` under its ``hsa`` directory."""
    return Path(asm_dir) / arch / "mla" / "mla_asm.csv"


def installed_asm_dir() -> Path | str:
    """The installed AITER's ``hsa`` directory, or why it cannot be told."""
    try:
        core = importlib.import_module("aiter.jit.core")
        found = getattr(core, "AITER_ASM_DIR", None)
    except Exception as exc:  # a broken install is a reason, never a crash
        found, error = None, f"{type(exc).__name__}: {exc}"
    else:
        error = "aiter.jit.core has no AITER_ASM_DIR"
    found = found or os.environ.get(ASM_DIR_ENV)
    if not found:
        return f"cannot find AITER's kernel directory ({error}; {ASM_DIR_ENV} is unset)"
    return Path(found)


def read_table(path: Path, *, arch: str, source: str) -> KernelTable | str:
    """The decode rows of the table at `path`, or why they cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"cannot read AITER's MLA kernel table {path}: {exc.strerror or exc}"
    digest = hashlib.sha256(data).hexdigest()[:12]
    try:
        return parse_table(
            data.decode("utf-8"),
            arch=arch,
            source=f"{source} hsa/{arch}/mla/mla_asm.csv (sha256 {digest})",
        )
    except (UnicodeDecodeError, ValueError) as exc:
        return f"AITER's MLA kernel table {path} is malformed: {exc}"


def installed_table(arch: str, version: str) -> KernelTable | str:
    """The installed AITER's table for `arch` (the backend's only source), or why not."""
    asm_dir = installed_asm_dir()
    if isinstance(asm_dir, str):
        return asm_dir
    return read_table(table_path(asm_dir, arch), arch=arch, source=f"aiter {version}")


def vendored_commit() -> str:
    """The AITER commit the vendored tables were copied from."""
    return str(json.loads(MANIFEST.read_text(encoding="utf-8"))["aiter_commit"])


def vendored_table(arch: str) -> KernelTable:
    """The vendored copy of `arch`'s table; raises if it is missing or malformed."""
    made = read_table(
        table_path(VENDORED_ASM_DIR, arch), arch=arch, source=f"aiter {vendored_commit()[:10]}"
    )
    if isinstance(made, str):
        raise ValueError(made)
    return made
