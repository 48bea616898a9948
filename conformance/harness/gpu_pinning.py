"""One GPU per pytest-xdist worker on a multi-GPU host.

Each worker ``gwK`` of ``-n N`` sees exactly one device: the ``K mod len(devices)``-th of the
devices visible to the controller (the visible-devices variable of the backend's declared
device kind: ``CUDA_VISIBLE_DEVICES`` for cuda, ``HIP_VISIBLE_DEVICES`` for rocm), or of
``0..MLA_GPU_COUNT-1`` when that variable is set, else of ``0..N-1``. The variable must be set
before torch initialises the device runtime; the report plugin does it in the worker's
``pytest_configure``, before any test module is imported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from conformance.runs.environment import gpu_count
from conformance.targets import DEVICE_KINDS, device_of

_WORKER_ID = re.compile(r"^gw(\d+)$")


def worker_number(worker_id: str) -> int | None:
    """``"gw3"`` → 3; None for anything that is not an xdist worker id."""
    match = _WORKER_ID.match(worker_id)
    return None if match is None else int(match.group(1))


def pinned_devices(
    device_kind: str | None, environ: Mapping[str, str], *, worker_id: str, worker_count: int
) -> dict[str, str]:
    """The environment changes that give worker ``worker_id`` its own device of a kind.

    Returns ``{}`` when nothing should change: a CPU (or unknown) kind, fewer than two workers,
    or an id that is not an xdist worker's. Raises `ValueError` for a bad ``MLA_GPU_COUNT``.
    """
    kind = DEVICE_KINDS.get(device_kind or "")
    variable = None if kind is None else kind.visible_devices
    number = worker_number(worker_id)
    if variable is None or number is None or worker_count < 2:
        return {}
    visible = [item.strip() for item in environ.get(variable, "").split(",") if item.strip()]
    if not visible:
        count = gpu_count(environ) or worker_count
        visible = [str(index) for index in range(count)]
    return {variable: visible[number % len(visible)]}


def pinned_for_backend(
    backend: str, environ: Mapping[str, str], *, worker_id: str, worker_count: int
) -> dict[str, str]:
    """`pinned_devices` for the device kind ``backend`` declares (built-in or plug-in)."""
    device = device_of(backend) if worker_count > 1 else None
    kind = None if device is None else device.name
    return pinned_devices(kind, environ, worker_id=worker_id, worker_count=worker_count)
