"""The last native call of a process, written down before it is made: a worker that dies
inside a vendor library (an ``abort()`` in a ctypes op) leaves its reason behind.

A backend wraps each call into a vendor's native code in `native_call`; when the harness has
set `NOTES_ENV` (a directory), the call's description is written to this process's note file
before the call and removed after it returns or raises. A pytest-xdist controller that sees
a worker crash reads the worker's note (`last_native_call`) and reports it with the test.
Torch-free, no pytest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NOTES_ENV = "MLA_NATIVE_CALL_NOTES"
"""The directory of the note files (unset: nothing is written)."""
WORKER_ENV = "PYTEST_XDIST_WORKER"


def note_path(directory: Path | str, worker: str) -> Path:
    """The note file of the process that is `worker` (``gw0``, or ``main``)."""
    return Path(directory) / f"native-call-{worker}.txt"


@contextmanager
def native_call(description: str) -> Iterator[None]:
    """Write `description` to this process's note while the block runs."""
    directory = os.environ.get(NOTES_ENV)
    if not directory:
        yield
        return
    path = note_path(directory, os.environ.get(WORKER_ENV, "main"))
    try:
        path.write_text(description, encoding="utf-8")
    except OSError:  # a note that cannot be written must not stop the call
        yield
        return
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def last_native_call(directory: Path | str, worker: str) -> str | None:
    """The native call `worker` was inside when it died (None: it was in none)."""
    try:
        return note_path(directory, worker).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
