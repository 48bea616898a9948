"""A pytest-xdist worker that dies mid-test: that test's error carries the reason.

pytest-xdist reports the test a worker was running when it died as failed ("worker 'gw0'
crashed while running ...") and starts a new worker; the run goes on and its JUnit is
written. This plugin adds why: the controller points the workers at a notes directory
(`conformance.native_calls`), and the crash report names the vendor call the worker was
inside (e.g. ``aiter.mla.mla_decode_fwd`` with its kernel key), or says it was in none.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conformance.native_calls import NOTES_ENV, last_native_call

NOTES_KEY = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """On the controller: a notes directory the workers inherit (they start after this)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or NOTES_ENV in os.environ:
        return
    directory = Path(tempfile.mkdtemp(prefix="mla-native-calls-"))
    os.environ[NOTES_ENV] = str(directory)
    config.stash[NOTES_KEY] = directory


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(NOTES_KEY, None)
    if directory is not None:
        os.environ.pop(NOTES_ENV, None)
        for note in directory.glob("native-call-*.txt"):
            note.unlink(missing_ok=True)
        directory.rmdir()


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    """Name the native call the crashed worker was inside."""
    directory = os.environ.get(NOTES_ENV)
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    last = None if directory is None or worker is None else last_native_call(directory, worker)
    reason = (
        f"the worker died inside {last} (a native abort or crash: the vendor library's check "
        f"failed in a call that cannot raise)"
        if last
        else "the worker died outside any vendor call the backend noted"
    )
    report.longrepr = f"{report.longrepr}: {reason}"
