"""How a CI job gets the Python that runs nox, on hosted and on self-hosted GPU runners.

- Every job installs nox and uv into a virtual environment, ``.venv``, that sees the
  runner's own packages (``--system-site-packages``: a GPU machine's vendor torch), and runs
  nox from it: the system Python of current Debian and Ubuntu is externally managed
  (PEP 668), and pip refuses to install into it.
- A hosted job (no GPU: the ``cpu`` and ``interpret`` sessions, the sign-off) takes PyTorch's
  CPU wheels (`CPU_WHEELS_ENV`): plain PyPI's torch is the CUDA build, about 2.4 GiB of
  ``nvidia-*`` wheels. pip reads ``PIP_EXTRA_INDEX_URL``; uv reads its own variables and,
  to take torch from that index rather than PyPI's, ``unsafe-best-match``.
"""

from __future__ import annotations

VENV = ".venv"
TOOLS = "requirements/tools.txt"
CPU_WHEELS_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_WHEELS_ENV: dict[str, str] = {
    "PIP_EXTRA_INDEX_URL": CPU_WHEELS_INDEX,
    "UV_EXTRA_INDEX_URL": CPU_WHEELS_INDEX,
    "UV_INDEX_STRATEGY": "unsafe-best-match",
}
SETUP = (
    f"python3 -m venv {VENV} --system-site-packages && {VENV}/bin/python -m pip install -r {TOOLS}"
)
"""The shell command that makes the job's virtual environment with nox and uv in it."""
NOX = f"{VENV}/bin/python -m nox"
"""How a job runs nox: from its virtual environment."""
