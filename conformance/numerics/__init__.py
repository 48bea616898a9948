"""Numerics shared by every backend: fp8 formats, the error model, the comparator.

- `fp8`: fp8 dtypes per architecture, per-tensor quantization;
- `tolerances`: tolerances against the fp64 reference, from a written error model;
- `compare`: NaN/Inf positions, abs-or-rel and cosine checks with a report.
"""

from __future__ import annotations
