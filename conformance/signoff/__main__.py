"""``python -m conformance.signoff``: the sign-off without the ``conformance`` dispatcher."""

from __future__ import annotations

import sys

from conformance.signoff.cli import run

sys.exit(run())
