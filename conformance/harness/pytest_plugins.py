"""Which pytest plugins a GPU session's run loads: those the suite needs, not whatever is there.

A GPU session sees the interpreter's site packages (``--system-site-packages``, and a ``.pth``
file where nox runs in a virtualenv), so that a GPU machine's vendor torch is used as
installed. pytest would then also load every plugin installed there through its entry points
(one that reorders tests, one that adds timeouts, one that fails to import). Such a run sets
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` and names what it needs with ``-p``: the suite's own
plugins come from ``pyproject.toml``'s ``addopts``; of the installed ones only xdist (``-n``,
one worker per GPU) is needed. Imports are untouched: the vendor torch still imports.
"""

from __future__ import annotations

AUTOLOAD_VARIABLE = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
NEEDED_PLUGINS: tuple[str, ...] = ("xdist.plugin",)
"""Installed plugins a conformance run loads by name (their modules, for ``-p``)."""


def isolated_plugins(importable: set[str]) -> tuple[dict[str, str], list[str]]:
    """The environment and pytest arguments of a run that loads only the plugins it needs.

    ``importable``: which top-level packages of `NEEDED_PLUGINS` the run's interpreter can
    import (a ``--no-venv`` interpreter may lack xdist; its run then has no ``-n`` either).
    """
    arguments = [
        argument
        for name in NEEDED_PLUGINS
        if name.split(".", 1)[0] in importable
        for argument in ("-p", name)
    ]
    return {AUTOLOAD_VARIABLE: "1"}, arguments


def needed_packages() -> list[str]:
    """The top-level packages of `NEEDED_PLUGINS` (what to probe the interpreter for)."""
    return sorted({name.split(".", 1)[0] for name in NEEDED_PLUGINS})
