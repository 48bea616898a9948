"""CI and session support: `matrix` (jobs from ``nox --json -l``), `buildkite` (the same as a
Buildkite pipeline), `runner_env` (a CI job's virtual environment and wheel index),
`sessions` (the noxfile's argument checks) and `installer` (pip's wheel sources handed to
uv)."""

from __future__ import annotations
