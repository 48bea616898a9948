"""Engine tests run on an engine's own code, inside that engine's session (``nox -s vllm``).

Without the engine installed, nothing here is collected: the engine session says why.
"""

from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("vllm") else ["vllm/*"]
