"""`Issue`: one sign-off issue, a message that knows the code of the check that raised it.

An `Issue` is a ``str`` everywhere a message is expected (reasons, reports, the merged JUnit);
its ``code`` is one of `conformance.signoff.checks.CHECKS`.
"""

from __future__ import annotations

from collections.abc import Iterable


class Issue(str):
    """A message with the code of its check (``SIGN001`` ...)."""

    code: str

    def __new__(cls, code: str, message: str) -> Issue:
        issue = super().__new__(cls, message)
        issue.code = code
        return issue

    def __reduce__(self) -> tuple[type[Issue], tuple[str, str]]:
        return Issue, (self.code, str(self))


def coded(code: str, messages: Iterable[str]) -> list[Issue]:
    """Each message as an issue of ``code`` (one that has a code keeps it)."""
    return [message if isinstance(message, Issue) else Issue(code, message) for message in messages]


def code_of(message: str) -> str | None:
    """The code of an issue; None for a plain message."""
    return message.code if isinstance(message, Issue) else None
