"""The pytest machinery of a conformance run.

- `plugin`: backend selection and availability gating (``-p conformance.harness.plugin``);
- `not_applicable`: the only not-applicable skips, from the backend's declaration;
- `reporting`: the report plugin's hooks (shards, expectations, sidecar, archive);
- `run_state`: what the report plugin learns during one session;
- `sidecar`: the ``.meta.json`` beside each JUnit file;
- `selection`: partial selections, which never supersede a full report;
- `archive`: moving superseded reports to ``reports/previous/``;
- `expectations`: per-backend expectation files (``conformance/expectations/``);
- `sharding`: duration-balanced (else hashed) shards and JUnit file names;
- `gpu_pinning`: one GPU per xdist worker;
- `provenance`: the machine and software facts a run records.
"""

from __future__ import annotations
