"""The suite's pytest plugin: backend selection, availability gating, JUnit properties.

Not-applicable skips come from here alone (`conformance.harness.not_applicable`).

Loaded with ``-p conformance.harness.plugin`` (pyproject's addopts). The backend comes from
``--backend NAME`` or ``MLA_CONFORMANCE_BACKEND``; test bodies never name one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backends.base import Availability, Backend
from conformance.harness import not_applicable

BACKEND_ENV = "MLA_CONFORMANCE_BACKEND"
CONFORMANCE_DIR = Path(__file__).resolve().parents[2] / "tests" / "conformance"

backend_name_key = pytest.StashKey[str]()
availability_key = pytest.StashKey[Availability]()


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # The report plugin (sharding, expectations, sidecars) adds options of its own, so it
    # must be registered before the command line is parsed.
    from conformance.harness import reporting as report_plugin

    if not pluginmanager.is_registered(report_plugin):
        pluginmanager.register(report_plugin, "mla-report")
    group = parser.getgroup("mla-conformance", "MLA conformance suite")
    group.addoption(
        "--backend",
        default=os.environ.get(BACKEND_ENV, "cpu"),
        help=f"backend under test (default: ${BACKEND_ENV} or 'cpu')",
    )


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("backend")
    if name == "interpret":
        # Triton reads this once, when it is first imported.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    config.stash[backend_name_key] = name
    config.stash[availability_key] = _availability(name)
    config.stash[not_applicable.DECLARATION_KEY] = not_applicable.declaration_of(name)
    if not config.pluginmanager.is_registered(not_applicable):
        config.pluginmanager.register(not_applicable, "mla-not-applicable")


def _availability(name: str) -> Availability:
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
    name = config.stash[backend_name_key]
    avail = config.stash[availability_key]
    state = "available" if avail.available else f"UNAVAILABLE ({avail.reason})"
    lines = [f"mla-conformance backend: {name} [{state}]"]
    env = [f"{k}={v}" for k, v in sorted(os.environ.items()) if "MLA_CONFORMANCE" in k]
    if env:
        lines.append("mla-conformance env: " + " ".join(env))
    return lines


def family_of(item: pytest.Item) -> str | None:
    """The conformance family of a test: its module's ``CONFORMANCE_FAMILY``, else its name
    minus ``test_``."""
    path = Path(str(item.path)).resolve()
    if path.parent != CONFORMANCE_DIR or not path.stem.startswith("test_"):
        return None
    module = getattr(item, "module", None)
    return getattr(module, "CONFORMANCE_FAMILY", None) or path.stem.removeprefix("test_")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    name = config.stash[backend_name_key]
    avail = config.stash[availability_key]
    skip = pytest.mark.skip(reason=f"backend {name} unavailable: {avail.reason}")
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


@pytest.fixture(scope="session")
def backend_name(pytestconfig: pytest.Config) -> str:
    """Name of the backend under test."""
    return pytestconfig.stash[backend_name_key]


@pytest.fixture(scope="session")
def backend(pytestconfig: pytest.Config) -> Backend:
    """The backend under test (tests are skipped before this runs if it is unavailable)."""
    from backends.registry import get_backend

    return get_backend(pytestconfig.stash[backend_name_key])
