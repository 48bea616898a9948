"""``python -m conformance``: the command line (`main` dispatches to each subcommand)."""

from __future__ import annotations
