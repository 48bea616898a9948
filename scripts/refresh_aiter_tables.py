"""Refresh the vendored AITER MLA kernel tables from an AITER source tree or installation.

    python3 scripts/refresh_aiter_tables.py --source PATH [--commit SHA] [--dry-run]
    python3 scripts/refresh_aiter_tables.py --installed [--commit SHA] [--dry-run]

PATH is an AITER checkout (its ``hsa/`` is read; the commit comes from ``git rev-parse``)
or an installed package's ``aiter_meta`` directory; ``--installed`` reads the ``hsa/`` of the
AITER this Python imports (``aiter.jit.core.AITER_ASM_DIR``; its ``__version__`` names it
unless ``--commit`` is given). Copies ``hsa/<arch>/mla/mla_asm.csv`` of gfx942 and gfx950
verbatim into ``backends/rocm/tables/``, checks that each parses, rewrites ``MANIFEST.json``
(the source, commit and sha256 of each table) and prints which decode kernels were added or
removed, LSE variants included. The kernel choice itself (`conformance.aiter_kernels`) is code
read from AITER's source: when AITER changes ``aiter/mla.py`` or ``asm_mla.cu``, update it too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.rocm.kernel_table import MANIFEST, TABLES, installed_asm_dir  # noqa: E402
from conformance.aiter_kernels import ARCHES, KernelTable, parse_table  # noqa: E402


def _git_commit(tree: Path) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _source(args: argparse.Namespace) -> tuple[Path, str]:
    """The ``hsa`` directory to read and what it is (commit or version)."""
    if args.installed:
        found = installed_asm_dir()
        if isinstance(found, str):
            raise SystemExit(f"--installed: {found}")
        import aiter  # the same AITER installed_asm_dir imported

        return found, args.commit or f"aiter {getattr(aiter, '__version__', 'unknown')}"
    tree = Path(args.source)
    if not (tree / "hsa").is_dir():
        raise SystemExit(f"--source {tree}: no hsa/ directory (expected an AITER checkout)")
    commit = args.commit or _git_commit(tree)
    if not commit:
        raise SystemExit(f"--source {tree}: not a git checkout; name its commit with --commit")
    return tree / "hsa", commit


def _rows(table: KernelTable) -> set[tuple]:
    return {
        (r.name, r.q_type, r.kv_type, r.gqa, r.persistent, r.q_seq_len, r.lse) for r in table.rows
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--source", help="an AITER checkout or an installed aiter_meta directory")
    where.add_argument("--installed", action="store_true", help="the AITER this Python imports")
    parser.add_argument("--commit", help="the AITER commit (or version) the tables come from")
    parser.add_argument("--dry-run", action="store_true", help="report, write nothing")
    parser.add_argument("--tables", default=str(TABLES), help=f"where to write (default {TABLES})")
    args = parser.parse_args(argv)
    tables = Path(args.tables)
    hsa, commit = _source(args)
    manifest = {
        "aiter_repository": "https://github.com/ROCm/aiter",
        "aiter_commit": commit,
        "refreshed": date.today().isoformat(),
        "note": "AMD AITER's MLA kernel tables (data) copied verbatim; refresh with "
        "scripts/refresh_aiter_tables.py",
        "tables": {},
    }
    for arch in ARCHES:
        relative = f"hsa/{arch}/mla/mla_asm.csv"
        data = (hsa / arch / "mla" / "mla_asm.csv").read_bytes()
        new = parse_table(data.decode("utf-8"), arch=arch, source=f"{commit} {relative}")
        target = tables / relative
        old_rows = set()
        if target.exists():
            text = target.read_text(encoding="utf-8")
            old_rows = _rows(parse_table(text, arch=arch, source=str(target)))
        for sign, rows in (("+", _rows(new) - old_rows), ("-", old_rows - _rows(new))):
            for row in sorted(rows):
                print(f"{arch} {sign} {row[0]} ({', '.join(map(str, row[1:]))})")
        manifest["tables"][relative] = hashlib.sha256(data).hexdigest()
        if not args.dry_run:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    if not args.dry_run:
        (tables / MANIFEST.name).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"{'would refresh' if args.dry_run else 'refreshed'} from {commit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
