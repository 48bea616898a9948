"""Moved to `conformance.runs.atomic`; these names stay here for one release."""

from __future__ import annotations

from conformance.runs.atomic import atomic_write_bytes, atomic_write_text, current_umask

__all__ = ["atomic_write_bytes", "atomic_write_text", "current_umask"]
