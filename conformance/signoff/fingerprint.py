"""The files that decide a backend's behaviour, and their sha256: what evidence was made from.

Evidence records this fingerprint when it is saved; the sign-off recomputes it in the checkout
being signed off, and evidence whose files have changed is STALE, naming them. The files: the
backend's own module(s) and kernels, the shared builder, the domain packages (metadata model,
layer protocol, planner, numerics), the conformance tests, the goldens manifest, and the
backend's expectation file. A backend's own files are declared with it (``behaviour_files`` in
`conformance.targets`, or on a plug-in's class); a third-party backend adds the module it is
registered from when that module lies inside the checkout.

``python -m conformance.signoff.fingerprint BACKEND`` prints the fingerprint as JSON.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from conformance.runs.provenance import git_facts
from conformance.targets import ENTRY_POINT_GROUP, declared

COMMON_FILES: tuple[str, ...] = (
    "backends/base.py",
    "backends/common.py",
    "conformance/applicability.py",
    "conformance/aiter_kernels.py",
    "conformance/rule_table.py",
    "conformance/metadata/*.py",
    "conformance/stubs/*.py",
    "conformance/persistent/*.py",
    "conformance/numerics/*.py",
    "conformance/goldens/*.py",
    "tests/conformance/*.py",
    "tests/goldens/manifest.json",
)
FINGERPRINT_KEY = "fingerprint"


def _plugin_module(backend: str, root: Path) -> list[str]:
    """The repository-relative file of a third-party backend's module, if it is in ``root``."""
    try:
        for point in entry_points(group=ENTRY_POINT_GROUP):
            if point.name == backend:
                spec = find_spec(point.value.partition(":")[0])
                origin = None if spec is None else spec.origin
                if origin:
                    return [Path(origin).resolve().relative_to(root.resolve()).as_posix()]
    except (ImportError, ValueError, OSError):
        pass
    return []


def _declared_files(backend: str) -> tuple[str, ...]:
    """The behaviour files ``backend`` declares (`conformance.targets`, or its class)."""
    target = declared(backend)
    return () if target is None else target.behaviour_files


def unmatched_patterns(patterns: Sequence[str], root: Path) -> list[str]:
    """The glob patterns that match no file under ``root`` (a stale declaration)."""
    return [pattern for pattern in patterns if not any(root.glob(pattern))]


def behaviour_files(backend: str, root: Path) -> list[str]:
    """Repository-relative paths of the files that decide ``backend``'s behaviour."""
    patterns = [
        *COMMON_FILES,
        *_declared_files(backend),
        f"conformance/expectations/{backend}.txt",
    ]
    found = {path.relative_to(root).as_posix() for p in patterns for path in root.glob(p)}
    found.update(name for name in _plugin_module(backend, root) if (root / name).is_file())
    return sorted(name for name in found if (root / name).is_file())


def file_hashes(names: list[str], root: Path) -> dict[str, str]:
    """``{path: sha256}`` of each file (read whole: these are source files)."""
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in names}


def fingerprint(backend: str, root: Path) -> dict[str, Any]:
    """The commit and the hashes of ``backend``'s behaviour files in the checkout at ``root``."""
    facts = git_facts(root)
    return {
        "backend": backend,
        "commit": facts.get("git_commit"),
        "dirty": facts.get("git_dirty"),
        "files": file_hashes(behaviour_files(backend, root), root),
    }


def changed_files(recorded: Mapping[str, Any], backend: str, root: Path) -> list[str]:
    """``changed: path`` / ``removed: path`` / ``new: path`` between a fingerprint and now."""
    files = recorded.get("files")
    if not isinstance(files, Mapping) or not files:
        return ["no file hashes recorded"]
    now = file_hashes(behaviour_files(backend, root), root)
    changes = [
        f"changed: {name}"
        for name, digest in sorted(files.items())
        if name in now and now[name] != digest
    ]
    changes += [f"removed: {name}" for name in sorted(files) if name not in now]
    changes += [f"new: {name}" for name in sorted(now) if name not in files]
    return changes


def main(argv: list[str] | None = None) -> int:
    """Print the fingerprint of the backend named in ``argv`` for the current directory."""
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1:
        print("usage: python -m conformance.signoff.fingerprint BACKEND", file=sys.stderr)
        return 2
    print(json.dumps(fingerprint(arguments[0], Path.cwd()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
