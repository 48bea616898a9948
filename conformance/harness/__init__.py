"""The pytest machinery of a conformance run.

- `plugin`: backend selection and availability gating (``-p conformance.harness.plugin``);
- `reporting`: shards, expectations and the JUnit sidecar of a run;
- `expectations`: per-backend expectation files (``conformance/expectations/``);
- `sharding`: deterministic shards and JUnit file names;
- `gpu_pinning`: one GPU per xdist worker;
- `provenance`: the machine and software facts a run records.
"""

from __future__ import annotations
