"""The suite's pytest plugin: backend selection, availability gating, JUnit properties.

Loaded with ``-p conformance.harness.plugin`` (pyproject's addopts); it loads the report plugin
(`conformance.harness.reporting`). The backend comes from ``--backend NAME``, else
``MLA_CONFORMANCE_BACKEND``, else ``cpu``: `chosen_backend` resolves it once per session into
``config.stash[BACKEND_KEY]``, which every other part of the harness reads. Test bodies never
name a backend. Not-applicable skips come from here alone (`conformance.harness.not_applicable`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from conformance.harness import crashes, not_applicable
from conformance.runs.environment import BACKEND_VARIABLE, DEFAULT_BACKEND
from conformance.targets import declared

if TYPE_CHECKING:
    from backends.base import Availability, Backend

# The report plugin (sharding, expectations, sidecars) adds options of its own: registered
# with this plugin, before the command line is parsed.
pytest_plugins = ["conformance.harness.reporting"]

CONFORMANCE_TESTS = Path("tests") / "conformance"
"""Where the shared conformance set lives, relative to the repository (or a copy of it)."""

BACKEND_KEY = pytest.StashKey[str]()
"""The backend under test, resolved once (`chosen_backend`)."""
backend_name_key = BACKEND_KEY  # the name this key had before
availability_key = pytest.StashKey["Availability"]()


def chosen_backend(config: pytest.Config) -> str:
    """The backend under test: ``--backend``, else ``$MLA_CONFORMANCE_BACKEND``, else ``cpu``;
    resolved on the first call and kept in ``config.stash`` for every later one."""
    if BACKEND_KEY not in config.stash:
        try:
            value = config.getoption("backend")
        except ValueError:  # this plugin's options are not registered (the report plugin alone)
            value = None
        config.stash[BACKEND_KEY] = str(
            value or os.environ.get(BACKEND_VARIABLE) or DEFAULT_BACKEND
        )
    return config.stash[BACKEND_KEY]


def is_conformance_test(path: Path | str) -> bool:
    """Whether a test file belongs to the shared conformance set (``tests/conformance/test_*``)."""
    path = Path(path)
    return (
        path.stem.startswith("test_")
        and path.parent.name == CONFORMANCE_TESTS.name
        and path.parent.parent.name == CONFORMANCE_TESTS.parent.name
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mla-conformance", "MLA conformance suite")
    group.addoption(
        "--backend",
        default=None,
        help=f"backend under test (default: ${BACKEND_VARIABLE} or '{DEFAULT_BACKEND}')",
    )


def pytest_configure(config: pytest.Config) -> None:
    name = chosen_backend(config)
    target = declared(name)
    # Before any test module imports the backend (Triton reads TRITON_INTERPRET once).
    for variable, value in (target.environment if target is not None else {}).items():
        os.environ.setdefault(variable, value)
    config.stash[availability_key] = _availability(name)
    config.stash[not_applicable.DECLARATION_KEY] = not_applicable.declaration_of(name)
    if not config.pluginmanager.is_registered(not_applicable):
        config.pluginmanager.register(not_applicable, "mla-not-applicable")
    if not config.pluginmanager.is_registered(crashes):
        config.pluginmanager.register(crashes, "mla-crashes")  # configure is replayed to it


def _availability(name: str) -> Availability:
    from backends.base import Availability
    from backends.registry import get_backend

    try:
        backend = get_backend(name)
    except KeyError as exc:
        raise pytest.UsageError(str(exc.args[0])) from None
    except Exception as exc:  # a plug-in that does not load or declares itself wrongly
        raise pytest.UsageError(f"backend {name!r}: {type(exc).__name__}: {exc}") from None
    try:
        return backend.availability()
    except Exception as exc:  # an availability probe must never crash collection
        return Availability(False, f"availability check raised {type(exc).__name__}: {exc}")


def pytest_report_header(config: pytest.Config) -> list[str]:
    name = chosen_backend(config)
    avail = config.stash[availability_key]
    state = "available" if avail.available else f"UNAVAILABLE ({avail.reason})"
    lines = [f"mla-conformance backend: {name} [{state}]"]
    env = [f"{k}={v}" for k, v in sorted(os.environ.items()) if "MLA_CONFORMANCE" in k]
    if env:
        lines.append("mla-conformance env: " + " ".join(env))
    return lines


def family_of(item: pytest.Item) -> str | None:
    """The conformance family of a test: its module's ``CONFORMANCE_FAMILY``, else its name
    minus ``test_``; None for a test outside the conformance set."""
    path = Path(str(item.path))
    if not is_conformance_test(path):
        return None
    module = getattr(item, "module", None)
    return getattr(module, "CONFORMANCE_FAMILY", None) or path.stem.removeprefix("test_")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    name = chosen_backend(config)
    avail = config.stash[availability_key]
    skip = pytest.mark.skip(reason=unavailable_skip_reason(name, avail.reason))
    declaration = config.stash[not_applicable.DECLARATION_KEY]
    for item in items:
        family = family_of(item)
        if family is None:
            continue
        item.add_marker(pytest.mark.family(family))
        item.user_properties.append(("backend", name))
        item.user_properties.append(("family", family))
        if not avail.available:
            item.add_marker(skip)
        elif declaration is not None:
            not_applicable.mark(item, declaration)


def unavailable_skip_reason(name: str, reason: str) -> str:
    """The skip reason of every conformance test of a backend that cannot run here."""
    return f"backend {name} unavailable: {reason}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Fold an unavailable backend's skips into one summary line, not one per test location.

    Runs after the JUnit file is written and before pytest's short summary (``-ra``), so only
    the terminal sees the skips' location as the conformance folder.
    """
    config = terminalreporter.config
    avail = config.stash.get(availability_key, None)
    if avail is None or avail.available:
        return
    reason = unavailable_skip_reason(chosen_backend(config), avail.reason)
    folder = str(config.rootpath / CONFORMANCE_TESTS)
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            if str(longrepr[2]).removeprefix("Skipped: ") == reason:
                report.longrepr = (folder, None, longrepr[2])


@pytest.fixture(scope="session")
def backend_name(pytestconfig: pytest.Config) -> str:
    """Name of the backend under test."""
    return chosen_backend(pytestconfig)


@pytest.fixture(scope="session")
def backend(pytestconfig: pytest.Config) -> Backend:
    """The backend under test (tests are skipped before this runs if it is unavailable)."""
    from backends.registry import get_backend

    return get_backend(chosen_backend(pytestconfig))
