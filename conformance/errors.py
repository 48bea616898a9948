"""Errors the harness raises; each names what is wrong and where."""

from __future__ import annotations


class ConformanceError(Exception):
    """Base class of every error the suite raises on purpose."""


class MetadataError(ConformanceError, ValueError):
    """A `CommonAttentionMetadata` breaks an invariant.

    The message names the field, what was expected and what was found.
    """

    def __init__(self, field: str, expected: str, found: object) -> None:
        self.field = field
        self.expected = expected
        self.found = found
        super().__init__(f"{field}: expected {expected}, found {found}")


class StubIncompleteError(ConformanceError, AttributeError):
    """A layer stub lacks an attribute a metadata builder reads."""


class PlanError(ConformanceError, ValueError):
    """Bad input to a persistent-decode planner, or a plan that breaks an invariant."""


class BackendUnavailable(ConformanceError, RuntimeError):
    """The selected backend cannot run on this machine; the message says why."""
