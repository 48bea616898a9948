"""How a run words a skip the sign-off must recognise, beyond expectation files.

The harness (`conformance.harness.not_applicable`) rewrites a ``not applicable: ...`` skip that
the suite did not issue (a test body, the backend's own decode) as `claimed_elsewhere`; the
sign-off (`conformance.signoff.classify`) reads it back with `parse_claimed_elsewhere` and
blocks it as a not-applicable claim the declaration does not support (SIGN009).
"""

from __future__ import annotations

import re

CLAIMED_ELSEWHERE = "unexplained skip, not the suite's not-applicable"
_CLAIMED = re.compile(
    re.escape(CLAIMED_ELSEWHERE)
    + r" \(the declaration (?P<declared>.*?) does not rule this test out\): (?P<reason>.*)\Z",
    re.DOTALL,
)


def claimed_elsewhere(declared: str, reason: str) -> str:
    """The skip reason of a not-applicable claim the suite did not make (``reason`` without
    its ``not applicable: `` prefix; ``declared``: the declaration's words, or ``unknown``)."""
    return f"{CLAIMED_ELSEWHERE} (the declaration {declared} does not rule this test out): {reason}"


def parse_claimed_elsewhere(message: str) -> tuple[str, str] | None:
    """``(declared, reason)`` of a `claimed_elsewhere` message; None for any other message."""
    found = _CLAIMED.match(message)
    return None if found is None else (found.group("declared"), found.group("reason"))
