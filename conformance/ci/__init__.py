"""CI pipelines generated from the nox sessions (``python -m conformance.ci.matrix``)."""

from __future__ import annotations
