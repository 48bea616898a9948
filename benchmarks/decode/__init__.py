"""The decode benchmark's parts (`python -m benchmarks.bench_decode` is the entry point).

`cases` (the grid, tuning candidates), `inputs` (device inputs and the fp32 reference),
`timing` (CUDA-graph replays with L2 flushed), `impls` (the suite's decode and the in-repo
peers), `flashinfer_peer` (FlashInfer's MLA, when it imports), `record` (one case: check,
time, compare), `tuning` (``--tune`` / ``--ablate``), `precompile` (parallel kernel
compilation), `report` (environment, JSON and markdown).
"""
