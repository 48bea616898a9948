"""The softmax scales the suite passes to a decode, and where DeepSeek's comes from.

A decode computes the scores ``S = (q · k) × sm_scale × q_scale × kv_scale`` over q's 576
columns. ``sm_scale`` is the caller's: an engine passes its model's scale, and a backend
must use the one it receives, never one of its own (docs/plugins.md). The goldens and the
masking family therefore run at more than one scale (`SOFTMAX_SCALES`):

- ``absorbed-576``, ``1/√576``: one over the square root of the absorbed q width (latent
  512 + rope 64). It is the default of AITER's persistent decode and of the suite's
  kernels, and the scale of most goldens (the default of a case).
- ``deepseek-v3``: the scale DeepSeek-V3 and R1 run with. It belongs to the attention
  before absorption, whose q·k dot is ``qk_nope_head_dim + qk_rope_head_dim = 128 + 64 =
  192`` wide (absorbing ``W_UK`` into q rewrites ``q_nope · k_nope`` as ``q_latent · c_kv``
  without changing the score), and YaRN rope scaling multiplies it by ``mscale²``
  (DeepSeek's inference code; vLLM's ``DeepseekV2MLAAttention``:
  ``scaling = qk_head_dim ** -0.5 * mscale * mscale``), with YaRN's attention factor ::

      mscale = 0.1 · mscale_all_dim · ln(factor) + 1      (factor > 1; else 1)

  DeepSeek-V3's configuration has ``rope_scaling = {"type": "yarn", "factor": 40,
  "mscale_all_dim": 1.0, ...}``, hence ::

      mscale   = 0.1 · ln 40 + 1       = 1.368888…
      sm_scale = mscale² / √192        = 0.135234…   (3.2456 × 1/√576)

  A backend that computes its own scale from q's width (``1/√q.shape[-1]`` = 1/√576) is
  off by that factor 3.25; one that hard-codes DeepSeek's fails the ``absorbed-576`` cases.

`score_rms` gives the RMS of the scores on data with unit-RMS entries (the goldens' N(0, 1)
q and latent cache): 1 at ``1/√576``, 3.25 at DeepSeek-V3's scale. The error model takes it
as ``score_rms`` (docs/tolerances.md §1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from conformance.metadata.dims import DEEPSEEK_V3, MLADims

QK_WIDTH = DEEPSEEK_V3.dims.cache_width
"""576: the width of the absorbed q·k dot (latent 512 + rope 64)."""


@dataclass(frozen=True)
class YarnRopeScaling:
    """The two entries of a model's ``rope_scaling`` (type ``yarn``) the softmax scale uses."""

    factor: float
    mscale_all_dim: float


DEEPSEEK_V3_ROPE_SCALING = YarnRopeScaling(factor=40.0, mscale_all_dim=1.0)
"""DeepSeek-V3's (and R1's) ``rope_scaling``: YaRN, factor 40, ``mscale_all_dim`` 1.0."""


def yarn_mscale(factor: float, mscale_all_dim: float) -> float:
    """YaRN's attention factor: ``0.1 · mscale_all_dim · ln(factor) + 1``; 1 for factor ≤ 1."""
    if factor <= 1.0:
        return 1.0
    return 0.1 * mscale_all_dim * math.log(factor) + 1.0


def deepseek_sm_scale(dims: MLADims, rope_scaling: YarnRopeScaling | None) -> float:
    """A DeepSeek model's softmax scale: ``1/√(qk_nope + qk_rope) · mscale²``."""
    scale = 1.0 / math.sqrt(dims.qk_head_dim)
    if rope_scaling is not None:
        mscale = yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim)
        scale *= mscale * mscale
    return scale


DEFAULT_SOFTMAX_SCALE = "absorbed-576"
"""The scale of a golden case that names none."""
SOFTMAX_SCALES: Mapping[str, float] = {
    DEFAULT_SOFTMAX_SCALE: 1.0 / math.sqrt(QK_WIDTH),
    "deepseek-v3": deepseek_sm_scale(DEEPSEEK_V3.dims, DEEPSEEK_V3_ROPE_SCALING),
}
"""Every softmax scale the suite passes to a decode, by name (module docstring)."""
DEFAULT_SM_SCALE = SOFTMAX_SCALES[DEFAULT_SOFTMAX_SCALE]


def softmax_scale(name: str) -> float:
    """The scale called `name`; the error lists the known names."""
    try:
        return SOFTMAX_SCALES[name]
    except KeyError:
        raise ValueError(
            f"softmax_scale: expected one of {sorted(SOFTMAX_SCALES)}, found {name!r}"
        ) from None


def score_rms(sm_scale: float, *, width: int = QK_WIDTH, entry_rms: float = 1.0) -> float:
    """RMS of ``S = sm_scale · q·k`` when q and k have independent entries of RMS
    `entry_rms`: ``sm_scale · √width · entry_rms²`` (1.0 at ``1/√576`` on unit data)."""
    return sm_scale * math.sqrt(width) * entry_rms * entry_rms
