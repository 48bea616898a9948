"""Getting third-party backends into the environment a conformance run uses.

``MLA_CONFORMANCE_PLUGINS`` lists what to install, separated by spaces: pip requirements
or paths (``examples/dense_mla_plugin``, ``my-backend==1.2``, ``./wheels/x.whl``). The
backend sessions pass it to their installer before they run (`install_plugins`), so
``MLA_CONFORMANCE_PLUGINS=PATH nox -s cpu -- --backend NAME`` sees the plug-in's entry
point (group ``mla_conformance.backends``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping

PLUGINS_ENV = "MLA_CONFORMANCE_PLUGINS"


def plugin_requirements(environ: Mapping[str, str] | None = None) -> list[str]:
    """The requirements listed in ``MLA_CONFORMANCE_PLUGINS`` (shell-style quoting)."""
    value = (os.environ if environ is None else environ).get(PLUGINS_ENV, "")
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"{PLUGINS_ENV}: cannot split {value!r}: {exc}") from None


def install_plugins(
    install: Callable[..., object], environ: Mapping[str, str] | None = None
) -> list[str]:
    """Install the listed plug-ins with `install` (e.g. nox's ``session.install``).

    Returns what was installed (nothing when the variable is unset or empty).
    """
    requirements = plugin_requirements(environ)
    if requirements:
        install(*requirements)
    return requirements
