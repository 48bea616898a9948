"""MLA Conformance Suite: one contract, checked on every MLA attention backend."""

from __future__ import annotations

__version__ = "0.1.0"
