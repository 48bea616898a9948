"""Reading, parsing and extracting files: bounded, in parallel processes, cached.

Each file is ``stat``-ed and size-checked before it is opened (`tree.walk` already refused
anything that is not a regular file), read up to the size cap, then parsed and reduced to
its `facts`, as the engine's sites (`sites.EngineSites`) define them. A file that mentions
none of the engine's anchors (and is not an ``__init__.py``) is only hashed; its facts are
extracted later, in this process, if cross-file resolution asks for it. Facts are cached as
JSON (never pickle: a cache is data, not code) under the cache folder, keyed by the SHA-256
of the content, the engine and `FACTS_VERSION`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from conformance.audit.facts import FACTS_VERSION, extract
from conformance.audit.findings import Problem
from conformance.audit.sites import VLLM, EngineSites, sites_of

DEFAULT_MAX_FILE_SIZE = 2 * 1024 * 1024
_PARALLEL_FROM = 64
"""Trees with fewer files are read in this process (starting workers costs more)."""


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/mla-conformance/audit``, else ``~/.cache/mla-conformance/audit``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mla-conformance", "audit")


@dataclass(frozen=True)
class Options:
    """How files are read."""

    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    cache_dir: str | None = None
    """None: no cache."""
    jobs: int = 0
    """Worker processes; 0: one per core (at most 8); 1: none."""


def _cache_path(cache_dir: str, digest: str, engine: str) -> str:
    return os.path.join(cache_dir, digest[:2], f"{digest}.{engine}.json")


def _cache_get(cache_dir: str | None, digest: str, engine: str) -> dict[str, Any] | None:
    if cache_dir is None:
        return None
    try:
        with open(_cache_path(cache_dir, digest, engine), encoding="utf-8") as handle:
            facts = json.load(handle)
    except (OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) and facts.get("v") == FACTS_VERSION else None


def _cache_put(cache_dir: str | None, digest: str, engine: str, facts: dict[str, Any]) -> None:
    if cache_dir is None:
        return
    target = _cache_path(cache_dir, digest, engine)
    try:
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=os.path.dirname(target), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(facts, handle, separators=(",", ":"))
        os.replace(temp, target)
    except OSError:
        pass  # a cache that cannot be written only costs time


def read_bytes(path: str, display: str, cap: int) -> bytes | Problem:
    """The file's bytes, or the named problem that stops reading it."""
    try:
        size = os.stat(path).st_size
        if size > cap:
            return Problem(display, 0, "too-large", f"{size} bytes, over the {cap}-byte cap")
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
        fd = os.open(path, flags)
        try:
            data = os.read(fd, cap + 1)
            chunks = [data]
            while data and sum(map(len, chunks)) <= cap:
                data = os.read(fd, cap + 1)
                chunks.append(data)
        finally:
            os.close(fd)
    except OSError as exc:
        return Problem(display, 0, "unreadable", f"cannot read: {exc.strerror or exc}")
    data = b"".join(chunks)
    if len(data) > cap:
        return Problem(display, 0, "too-large", f"over the {cap}-byte cap")
    return data


def check_bytes(data: bytes, display: str) -> str | Problem:
    """The decoded text, or the named problem (a NUL byte; not UTF-8 and no coding line)."""
    if b"\0" in data:
        line = data[: data.index(b"\0")].count(b"\n") + 1
        return Problem(display, line, "nul-byte", "the file holds a NUL byte")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = data[:200].split(b"\n", 2)[:2]
        if not any(b"coding" in h for h in head):
            line = data[: exc.start].count(b"\n") + 1
            return Problem(
                display, line, "not-utf8", f"not UTF-8 and no coding declaration: {exc.reason}"
            )
        text = data.decode("latin-1")
    return text


def parse_facts(data: bytes, display: str, sites: EngineSites = VLLM) -> dict[str, Any] | Problem:
    """Parse `data` and extract its facts (as `sites` defines them), or the named problem."""
    text = check_bytes(data, display)
    if isinstance(text, Problem):
        return text
    limit = sys.getrecursionlimit()
    try:
        module = ast.parse(data, filename=display)
        return extract(module, text, sites)
    except SyntaxError as exc:
        return Problem(display, exc.lineno or 0, "syntax-error", exc.msg)
    except (RecursionError, MemoryError):
        return Problem(display, 0, "too-deep", "nesting too deep to parse or analyse")
    except ValueError as exc:
        return Problem(display, 0, "syntax-error", str(exc))
    finally:
        sys.setrecursionlimit(limit)


Job = tuple[str, str, bool, int, str | None, str]
"""``(path, display, full, cap, cache_dir, engine)``: one file to load."""


def load_one(job: Job) -> tuple[str, Any]:
    """Worker: one `Job` → (digest, facts | Problem | None). None: none of the engine's
    anchors, facts left for later."""
    path, display, full, cap, cache_dir, engine = job
    sites = sites_of(engine)
    data = read_bytes(path, display, cap)
    if isinstance(data, Problem):
        return "", data
    digest = hashlib.sha256(data).hexdigest()
    if not full and not any(anchor in data for anchor in sites.anchors):
        checked = check_bytes(data, display)
        return digest, checked if isinstance(checked, Problem) else None
    cached = _cache_get(cache_dir, digest, engine)
    if cached is not None:
        return digest, cached
    facts = parse_facts(data, display, sites)
    if isinstance(facts, dict):
        _cache_put(cache_dir, digest, engine, facts)
    return digest, facts


def load_many(jobs: list[Job], workers: int) -> list[tuple[str, Any]]:
    """`load_one` over `jobs`, in `workers` processes when worth it."""
    if workers == 0:
        workers = min(os.cpu_count() or 1, 8)
    if workers <= 1 or len(jobs) < _PARALLEL_FROM:
        return [load_one(job) for job in jobs]
    chunk = max(1, len(jobs) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(load_one, jobs, chunksize=chunk))
