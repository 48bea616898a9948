"""`Issue`: one sign-off issue, a message that knows the code of the check that raised it;
`Check`: one check of the sign-off, which makes the issues of its code.

An `Issue` is a ``str`` everywhere a message is expected (reasons, reports, the merged JUnit);
its ``code`` is the code of one `Check` of `conformance.signoff.checks`, which declares every
check once. A module raises an issue through its check (``MISSING_IDS.issue(message)``), never
by writing the code itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class Issue(str):
    """A message with the code of its check (``SIGN001`` ...)."""

    code: str

    def __new__(cls, code: str, message: str) -> Issue:
        issue = super().__new__(cls, message)
        issue.code = code
        return issue

    def __reduce__(self) -> tuple[type[Issue], tuple[str, str]]:
        return Issue, (self.code, str(self))


@dataclass(frozen=True)
class Check:
    """One sign-off check: its code and the one line ``docs/signoff.md`` lists for it."""

    code: str
    summary: str

    def issue(self, message: str) -> Issue:
        """``message`` as an issue of this check."""
        return Issue(self.code, message)

    def issues(self, messages: Iterable[str]) -> list[Issue]:
        """Each message as an issue of this check (one already coded keeps its own code)."""
        return [m if isinstance(m, Issue) else Issue(self.code, m) for m in messages]


def code_of(message: str) -> str | None:
    """The code of an issue; None for a plain message."""
    return message.code if isinstance(message, Issue) else None
