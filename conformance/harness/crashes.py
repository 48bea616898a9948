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

NOTES_KEY = pytest.StashKey[tuple[Path, "str | None"]]()


def pytest_configure(config: pytest.Config) -> None:
    """On a controller (any pytest process but an xdist worker): a notes directory of its own,
    which its workers inherit (they start after this); an inherited one is restored after."""
    if hasattr(config, "workerinput"):
        return
    directory = Path(tempfile.mkdtemp(prefix="mla-native-calls-"))
    config.stash[NOTES_KEY] = (directory, os.environ.get(NOTES_ENV))
    os.environ[NOTES_ENV] = str(directory)


def pytest_unconfigure(config: pytest.Config) -> None:
    directory, inherited = config.stash.get(NOTES_KEY, (None, None))
    if directory is None:
        return
    if inherited is None:
        os.environ.pop(NOTES_ENV, None)
    else:
        os.environ[NOTES_ENV] = inherited
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
