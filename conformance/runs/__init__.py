"""The run contract: what a conformance run leaves in ``reports/junit/`` and how it is read.

Below the pytest harness, the sign-off and the CI generators, which all take it from here:

- `names`: JUnit and sidecar file names, shards, the partial-run directory;
- `shards`: which tests belong to which shard (hash rule, or recorded durations);
- `record`: the run report a sidecar holds (`RunRecord`), which every writer fills;
- `sidecar`: the sidecar's machine facts, its atomic write and seal;
- `expectations`: per-backend expectation files (``conformance/expectations/``);
- `skip_reasons`: the harness's words for a not-applicable claim the suite did not make;
- `provenance`: the machine and software facts a run records;
- `environment`: the environment variables a run reads;
- `outputs`: the sign-off's output files beside the JUnit directory, and moving them aside;
- `archive`: moving the reports a new full run supersedes to ``reports/previous/``;
- `atomic`: atomic file writes.
"""

from __future__ import annotations
