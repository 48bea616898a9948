"""One entry of a rule table: a code, the check that implements it, one line of doc.

The plan invariants (`conformance.persistent.invariants.INVARIANTS`) and the validator's
rules (`conformance.metadata.validator.RULES`) are tables of these; each is listed, code by
code, in its page of ``docs/`` (the selftests hold the two together).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Subject = TypeVar("Subject")


@dataclass(frozen=True)
class Rule(Generic[Subject]):
    """A rule: its code (``I4``, ``V10``), the check run on the subject, one line of doc."""

    code: str
    check: Callable[[Subject], Any]
    doc: str
