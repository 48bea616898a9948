"""The pytest machinery of a conformance run.

- `plugin`: backend selection and availability gating (``-p conformance.harness.plugin``);
- `not_applicable`: the only not-applicable skips, from the backend's declaration;
- `reporting`: the report plugin's hooks (shards, expectations, sidecar, archive);
- `run_state`: what the report plugin learns during one session;
- `sidecar`: what the plugin records in the ``.meta.json`` beside each JUnit file;
- `selection`: partial selections, which never supersede a full report;
- `gpu_pinning`: one GPU per xdist worker, by the backend's declared device kind;
- `pytest_plugins`: a GPU session's run loads the pytest plugins it needs, not its site's.

File names, shards, the sidecar format, expectation files and provenance are the run
contract, shared with the sign-off: `conformance.runs`.
"""

from __future__ import annotations
