"""The kinds of declaration `conformance.targets` is made of: a device kind, a backend, an engine.

A **backend** (`BackendTarget`) is a `Backend` class the registry loads; an **engine**
(`EngineTarget`) is a serving engine tested on its own code, in an environment of its own: it
has no class, but a distribution, a pinned release, the releases its driver supports, what its
environment installs and the builders it must build. Both run on a `DeviceKind`, which says
what running on that kind of device means for workers, CI and nox. The facts themselves live
in `conformance.targets`; this module only says what they are.

Torch-free and suite-free: the registry, the pytest plugins, the sign-off, the CI generators
and the noxfile all read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

BACKEND, ENGINE = "backend", "engine"


@dataclass(frozen=True)
class DeviceKind:
    """What running on one kind of device means for workers, CI and nox."""

    name: str
    visible_devices: str | None
    """The variable that limits a process to some devices (None: a CPU)."""
    runner: str | tuple[str, ...]
    """GitHub Actions ``runs-on`` labels of its CI jobs."""
    queue: str
    """Buildkite agent queue of its CI jobs."""
    timeout_minutes: int
    tags: tuple[str, ...]
    """nox session tags; ``nox --json -l -t cpu gpu`` lists the CI's sessions."""

    @property
    def is_gpu(self) -> bool:
        """Whether its runs use GPUs (one xdist worker per GPU, each pinned to its own)."""
        return self.visible_devices is not None


@dataclass(frozen=True, kw_only=True)
class Target:
    """What every target declares: its name, what its session does, its device, the
    environment its runs need, and whether a plain ``nox`` and a release include it."""

    kind: ClassVar[str]
    """``backend`` or ``engine`` (an engine run's sidecar records it)."""
    name: str
    description: str
    """One line: the docstring of its nox session (what ``nox -l`` shows)."""
    device: DeviceKind
    behaviour_files: tuple[str, ...] = ()
    """Glob patterns, relative to the repository, of the suite's files that decide its
    behaviour (beyond the shared ones): the fingerprint of its evidence."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """Variables its runs set (if unset) before its tests import anything."""
    default: bool = False
    """A plain ``nox`` runs it; a plain sign-off expects it."""
    release: bool = False
    """A release sign-off requires it."""

    @property
    def device_kind(self) -> str:
        """The name of its `DeviceKind` (``cpu``, ``cuda``, ``rocm``)."""
        return self.device.name


@dataclass(frozen=True, kw_only=True)
class BackendTarget(Target):
    """A backend: the class the registry loads."""

    kind: ClassVar[str] = BACKEND
    class_path: str
    """``module:Class`` of its `Backend`."""

    def __post_init__(self) -> None:
        if ":" not in self.class_path:
            raise ValueError(
                f"target {self.name!r}: class_path: expected 'module:Class', "
                f"found {self.class_path!r}"
            )


@dataclass(frozen=True)
class Release:
    """One release of an engine's release matrix: its own pins, and its known findings."""

    pins: tuple[str, ...] = ()
    """``NAME==VERSION`` in place of the release's own pin of NAME (as ``--pin``)."""
    findings: Mapping[str, str] = field(default_factory=dict)
    """Engine test (``file.py::test[param]``) → the engine's code that makes it fail on this
    release: a finding the target reports, run as a strict xfail (it must still fail)."""


@dataclass(frozen=True, kw_only=True)
class EngineTarget(Target):
    """An engine: its distribution and releases, what its session installs and runs."""

    kind: ClassVar[str] = ENGINE
    distribution: str
    """Its PyPI distribution."""
    version: str
    """The release pinned by default."""
    min_version: str
    """Oldest release its driver supports (inclusive)."""
    below_version: str
    """First release its driver is not known to support (exclusive)."""
    python: str | None = None
    """The only Python its wheels are built for (its nox session's); None: nox's own."""
    runtime: tuple[str, ...]
    """Distributions its record and builders import on a CPU; versions come from the
    engine's own requirement pins where it has one."""
    suite: tuple[str, ...]
    """What the suite's tests need beside the engine (pytest, safetensors, ...)."""
    tests: str
    """The folder of its tests."""
    probe_modules: tuple[str, ...]
    """Modules that must import for the target to run; the first failure is the reason."""
    must_build: tuple[str, ...]
    """Its builders that must build on a CPU."""
    quiet_warnings: tuple[str, ...] = ()
    """pytest ``filterwarnings`` entries (regex module names) for the deprecation warnings the
    engine's own stack raises as it imports; the engine tests' conftest adds them, so a run
    shows the warnings of the code under test, not dozens of its dependencies'."""
    releases: Mapping[str, Release] = field(default_factory=dict)
    """The release matrix: each release the driver is measured on, with its own pins and
    known findings (none: the pinned release alone, no pins of its own)."""
    option_name: str | None = None
    """The name in its session's options (``--<name>-version``); None: the target's name."""
    whole_install: bool = False
    """Install the engine with every dependency it declares (its GPU stack: a GPU target),
    instead of `runtime` alone at its pins beside a CPU torch."""
    measures_facts: bool = True
    """Whether its tests measure an engine facts file (``reports/engines/``, SHA256SUMS);
    else they write only the run's statuses, beside its JUnit report."""

    def __post_init__(self) -> None:
        if self.supports(self.version) is not None:
            raise ValueError(
                f"target {self.name!r}: version {self.version} is outside "
                f">= {self.min_version}, < {self.below_version}"
            )

    def supports(self, version: str) -> str | None:
        """None if its driver supports `version`, else a one-line reason."""
        low, high = self.min_version, self.below_version
        if not version_key(low) <= version_key(version) < version_key(high):
            return (
                f"{self.name} {version} is outside the releases this suite drives "
                f"(>= {low}, < {high})"
            )
        return None

    def release_pins(self, version: str) -> tuple[str, ...]:
        """The pins the release matrix gives `version` (none for a release it does not list)."""
        return self.releases.get(version, Release()).pins

    def known_findings(self, version: str) -> Mapping[str, str]:
        """The engine tests that fail on `version` because of the engine's own code."""
        return self.releases.get(version, Release()).findings

    @property
    def option(self) -> str:
        """The name its session's options carry: ``--<option>-version``."""
        return self.option_name or self.name

    def facts_file(self, version: str) -> str:
        """The facts file name under reports/engines/ (a target measuring no facts: the
        statuses file beside its JUnit report)."""
        if not self.measures_facts:
            return f"{self.name}.statuses.json"
        return f"{self.name}-{version}.facts.json"


def version_key(version: str) -> tuple[int, ...]:
    """``0.33.0`` → (0, 33, 0); a pre/post/local tail is ignored."""
    parts = []
    for part in version.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)
