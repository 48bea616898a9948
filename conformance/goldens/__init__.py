"""Golden files of the persistent-decode family: cases, store, generation, tolerances.

- `cases`: the literal case table (`GoldenCase`, `CASES`);
- `store`: safetensors files plus a manifest with sha256 and provenance (`GoldenStore`,
  `GoldenError`); never pickle;
- `record`: a loaded golden and what to feed a backend (`Golden`, `load_golden`);
- `generate`: deterministic generation and checking (``python -m conformance.goldens``);
- `tolerance`: a backend's tolerance against a golden, from the fp64-reference ones.
"""

from __future__ import annotations

from conformance.goldens.cases import CASES, GoldenCase, case_table, get_case
from conformance.goldens.record import Golden, golden_from_stored, load_golden
from conformance.goldens.store import (
    GOLDENS_ENV,
    GoldenError,
    GoldenStore,
    Manifest,
    ManifestEntry,
    default_root,
)
from conformance.goldens.tolerance import GoldenBound, lse_tolerance, output_tolerance

__all__ = [
    "CASES",
    "GOLDENS_ENV",
    "Golden",
    "GoldenBound",
    "GoldenCase",
    "GoldenError",
    "GoldenStore",
    "Manifest",
    "ManifestEntry",
    "case_table",
    "default_root",
    "get_case",
    "golden_from_stored",
    "load_golden",
    "lse_tolerance",
    "output_tolerance",
]
