"""CI and session support: `matrix` (jobs from ``nox --json -l``), `buildkite` (the same as a
Buildkite pipeline), `sessions` (the noxfile's argument checks) and `installer` (pip's wheel
sources handed to uv)."""

from __future__ import annotations
