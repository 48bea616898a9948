"""Where SGLang's wheel installs: its only PyPI build is cp311 manylinux_2_34 x86_64.

Standard library only (the noxfile asks before anything is installed).
"""

from __future__ import annotations

import platform

WHEEL = "cp311-cp311-manylinux_2_34_x86_64"
MIN_GLIBC = (2, 34)


def unsupported_platform(
    system: str | None = None, machine: str | None = None, libc: tuple[str, str] | None = None
) -> str | None:
    """None where the wheel installs, else one line saying why not."""
    system = system or platform.system()
    machine = machine or platform.machine()
    name, version = libc or platform.libc_ver()
    if system != "Linux" or machine != "x86_64":
        return f"sglang: its wheel ({WHEEL}) is for Linux x86_64, not {system} {machine}"
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if name != "glibc" or parts < MIN_GLIBC:
        return f"sglang: its wheel ({WHEEL}) needs glibc >= 2.34, found {name or '?'} {version}"
    return None
