"""``python -m conformance``: the suite's command line."""

from __future__ import annotations

import sys

from conformance.cli.main import main

sys.exit(main())
