"""The Hopper decode in Gluon (Triton's layout-explicit dialect): `decode_kernel` for bf16
q and KV and for e4m3 (``float8_e4m3fn``) q and KV, `ws_kernel` a warp-specialized one for
both (chosen where a launch names no config at the kinds of
`kernels.triton_mla.config.WS_BY_DEFAULT`, or by a config with ``WS: 1``) whose loader
partition is `ws_loader`, and `narrow_kernel` for e4m3 blocks of 16 or 32 rows with tokens on
the MMA rows (chosen at the row counts of `kernels.triton_mla.config.NARROW_BY_DEFAULT`, or by
a config with ``NARROW: 1``). `parts` holds the device functions they share (row packing,
``cp.async`` tiles, scores, softmax, V's widening, the block's store). `ws_usable` and
`narrow_usable` say whether a launch can take those two; `disable_variant` turns one off
after it failed to compile (the launch falls back to `decode_kernel`).

`usable` says whether a launch can take one of them: an sm_90 GPU, a Triton with Gluon's
Hopper module, not under the interpreter, no earlier failure to compile (`disable`: Gluon is
experimental and its names move between Triton releases; a launch that cannot compile it
falls back to the Triton kernel), and either bf16 q and KV in 64 packed rows per block or
e4m3 q and KV in up to 64 (fewer rows are padded to one 64-row block). Importing this
package imports no Gluon; `kernel()` does, on first use. `kernels.triton_mla.launch` picks
them by `kernels.triton_mla.config.HOPPER_CONFIGS` and keeps the plain-Triton kernel for
every other case (fewer bf16 rows, bf16 q over fp8 KV, other GPUs, the interpreter).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch

BLOCK_M = 64
"""Packed (q token x head) rows of a block: one wgmma row tile of 64."""


_disabled: list[str] = []  # why the Gluon decode failed to compile here, once it has
_variant_disabled: dict[str, str] = {}  # "ws", "narrow": why that decode failed to compile


def disable(reason: str) -> None:
    """No launch takes the Gluon decode any more in this process (`reason` is kept)."""
    _disabled.append(reason)


def disabled_reason() -> str | None:
    """Why the Gluon decode was disabled, or None."""
    return _disabled[0] if _disabled else None


@functools.cache
def gluon_importable() -> bool:
    """Whether this Triton ships Gluon's Hopper module (wgmma, cp.async)."""
    try:
        return (
            importlib.util.find_spec("triton.experimental.gluon.language.nvidia.hopper") is not None
        )
    except ModuleNotFoundError:
        return False


@functools.cache
def _is_hopper(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


def usable(q: torch.Tensor, kv_cache: torch.Tensor, block_m: int, interpreted: bool) -> bool:
    """Whether the Gluon decode can run this launch (else the Triton kernel runs)."""
    if _disabled or interpreted or q.device.type != "cuda" or torch.version.hip is not None:
        return False
    bf16 = q.dtype == kv_cache.dtype == torch.bfloat16 and block_m == BLOCK_M
    if not bf16 and not (is_e4m3(q.dtype) and is_e4m3(kv_cache.dtype) and block_m <= BLOCK_M):
        return False
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    return _is_hopper(index) and gluon_importable()


def disable_variant(name: str, reason: str) -> None:
    """No launch takes the decode `name` ("ws": warp-specialized, "narrow") any more here."""
    _variant_disabled.setdefault(name, reason)


def variant_disabled_reason(name: str) -> str | None:
    """Why the decode `name` was disabled, or None."""
    return _variant_disabled.get(name)


def ws_usable(q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    """Whether a launch the Gluon decode takes can take the warp-specialized one: bf16 or
    e4m3 q and KV alike (its rows are those of `usable`: 64 packed, fewer e4m3 ones padded to
    64), not disabled."""
    if "ws" in _variant_disabled or q.dtype != kv_cache.dtype:
        return False
    return q.dtype == torch.bfloat16 or is_e4m3(q.dtype)


def narrow_usable(q: torch.Tensor, kv_cache: torch.Tensor, block_m: int) -> bool:
    """Whether a launch the Gluon decode takes can take the narrow one: e4m3 q and KV in
    blocks of fewer than 64 rows, not disabled."""
    narrow = block_m < BLOCK_M and is_e4m3(q.dtype) and is_e4m3(kv_cache.dtype)
    return narrow and "narrow" not in _variant_disabled


def is_e4m3(dtype: torch.dtype) -> bool:
    """Whether `dtype` is the e4m3 (``float8_e4m3fn``) the fp8 Gluon decode takes."""
    return dtype == getattr(torch, "float8_e4m3fn", None)


def kernel(kv_dtype: torch.dtype = torch.bfloat16, ws: bool = False, narrow: bool = False) -> Any:
    """The Gluon decode kernel for a cache of `kv_dtype` (imports Gluon): `decode_kernel`'s,
    with `ws` the warp-specialized one (`ws_kernel`), each for bf16 and e4m3 alike (the
    cache's element type picks its operands when it compiles), or with `narrow` the e4m3
    decode of 16- or 32-row blocks (`narrow_kernel`)."""
    if narrow:
        from kernels.gluon_mla.narrow_kernel import gluon_mla_narrow_decode_kernel

        return gluon_mla_narrow_decode_kernel
    if ws:
        from kernels.gluon_mla.ws_kernel import gluon_mla_ws_decode_kernel

        return gluon_mla_ws_decode_kernel
    from kernels.gluon_mla.decode_kernel import gluon_mla_decode_kernel

    return gluon_mla_decode_kernel
