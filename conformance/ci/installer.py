"""Make uv install from the same places as the user's pip.

uv reads ``UV_*`` variables and ``uv.toml``, never pip's configuration. Where pip is
configured (``pip.conf``, ``PIP_*`` variables) to find wheels in a folder or in extra indexes
(a CPU build of torch, for instance), the same settings are handed to uv as ``UV_*`` variables,
unless the user set those already.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

# the pip settings uv takes too, each from the variable UV_<SETTING> (find-links: UV_FIND_LINKS)
SHARED_SETTINGS: tuple[str, ...] = ("find-links", "index-url", "extra-index-url", "constraint")
PIP_TO_UV: dict[str, str] = {
    name: "UV_" + name.upper().replace("-", "_") for name in SHARED_SETTINGS
}


def parse_pip_config(text: str) -> dict[str, str]:
    """``pip config list`` output (``global.find-links='/wheels'``) → ``{"find-links": ...}``.

    Later scopes win, as in pip (``:env:`` lines come last).
    """
    settings: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition("=")
        if not separator:
            continue
        name = key.rsplit(".", 1)[-1].strip()
        if name in PIP_TO_UV:
            settings[name] = value.strip().strip("'\"")
    return settings


def pip_settings(python: str = sys.executable) -> dict[str, str]:
    """pip's own configuration as `python`'s pip sees it; empty without pip."""
    try:
        result = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_pip_config(result.stdout) if result.returncode == 0 else {}


def uv_environment(settings: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The ``UV_*`` variables that give uv pip's `settings`, leaving the user's own alone."""
    env: dict[str, str] = {}
    for name, value in settings.items():
        variable = PIP_TO_UV[name]
        if value and variable not in environ:
            env[variable] = " ".join(value.split())
    if ("UV_EXTRA_INDEX_URL" in env or "UV_FIND_LINKS" in env) and (
        "UV_INDEX_STRATEGY" not in environ
    ):
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"  # pip's rule: best version of any index
    return env
