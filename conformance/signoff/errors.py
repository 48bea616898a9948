"""The error the sign-off raises for an input it cannot use; the message names the file."""

from __future__ import annotations

from pathlib import Path

from conformance.errors import ConformanceError


class SignoffInputError(ConformanceError, ValueError):
    """A report, sidecar or evidence file that cannot be used, and why."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        self.reason = message
        super().__init__(f"{path}: {message}")
