"""``nox -s vllm``: make an engine's environment, run its tests, keep its reports and facts.

Steps, each logged: check the arguments; install the engine release with ``--no-deps``
(``-- --vllm-version X``; or use the interpreter's own with ``-- --vllm-from-interpreter``),
then torch (a CPU wheel where pip's find-links hold one, else the engine's own pin) and the
distributions its modules import on a CPU at the engine's own pins; probe the modules the
target needs; run its tests (JUnit ``reports/junit/<name>.xml`` and a ``.meta.json``
sidecar); write the facts file under ``reports/engines/``; print the wall time and the
environment's disk use. ``-- --tree PATH`` then audits that tree with the facts. Anything
that stops the run is one line (`EngineSessionError`), never a traceback.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.ci import installer
from conformance.engines.target import EngineTarget
from conformance.runs.archive import archive_superseded

REPORTS = Path("reports")
JUNIT_DIR = REPORTS / "junit"
FACTS_DIR = REPORTS / "engines"
FACTS_ENV = "MLA_ENGINE_FACTS"


class EngineSessionError(RuntimeError):
    """Why the engine session cannot go on, in one line."""


@dataclass(frozen=True)
class EngineOptions:
    version: str
    from_interpreter: bool
    tree: Path | None
    pytest_args: tuple[str, ...]
    show_usage: bool = False
    pins: tuple[str, ...] = ()


def usage(target: EngineTarget) -> str:
    """What ``nox -s <name> -- --help`` prints (before anything is installed)."""
    name = target.name
    return "\n".join(
        [
            f"usage: nox -s {name} -- [--{name}-version X | --{name}-from-interpreter]"
            " [--tree PATH] [PYTEST ARGS]",
            f"  --{name}-version X          the release to install (default"
            f" {target.default_version}; supported: >= {target.record.min_version},"
            f" < {target.record.below_version})",
            f"  --{name}-from-interpreter   the {name} of the interpreter that runs nox",
            "  --pin NAME==VERSION       replace the release's own pin of NAME (one the package"
            " index cannot satisfy); recorded in the sidecar",
            "  --tree PATH               then audit the source tree at PATH with the facts"
            " just measured",
            f"  anything else goes to pytest ({target.tests}); see docs/engines.md",
        ]
    )


def parse_options(target: EngineTarget, posargs: Sequence[str]) -> EngineOptions:
    """``--<name>-version X``, ``--<name>-from-interpreter``, ``--tree PATH``, ``-h``/``--help``
    (usage only); the rest goes to pytest."""
    version, from_interpreter, tree, rest = target.default_version, False, None, []
    pins: list[str] = []
    args = list(posargs)
    while args:
        arg = args.pop(0)
        key, _, value = arg.partition("=")
        if key in (f"--{target.name}-version", "--tree", "--pin") and not value:
            if not args:
                raise EngineSessionError(f"{key} needs a value")
            value = args.pop(0)
        if key == f"--{target.name}-version":
            version = value
        elif key == "--tree":
            tree = Path(value)
            if not tree.is_dir():
                raise EngineSessionError(f"--tree {value}: not a directory")
        elif key == "--pin":
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+", value):
                raise EngineSessionError(f"--pin {value!r}: expected NAME==VERSION")
            pins.append(value)
        elif arg == f"--{target.name}-from-interpreter":
            from_interpreter = True
        elif arg in ("-h", "--help"):
            return EngineOptions(version, from_interpreter, tree, (), show_usage=True)
        else:
            rest.append(arg)
    if not from_interpreter and not re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+-]*)", version):
        raise EngineSessionError(f"--{target.name}-version {version!r}: not a release number")
    return EngineOptions(version, from_interpreter, tree, tuple(rest), pins=tuple(pins))


def _stream(command: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Run `command` showing its output as it comes; return its code and last output line."""
    process = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    last = ""
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.strip():
            last = line.strip()
    return process.wait(), last


class Installer:
    """Installs into one environment with uv (pip's sources handed over) or pip."""

    def __init__(self, python: str, uv: str | None) -> None:
        self.python = python
        self.uv = uv
        settings = installer.pip_settings()
        self.find_links = settings.get("find-links", "")
        self.env = installer.uv_environment(settings, os.environ) if uv else {}

    def install(self, *requirements: str, what: str) -> None:
        if self.uv:
            command = [self.uv, "pip", "install", "--python", self.python, *requirements]
        else:
            command = [self.python, "-m", "pip", "install", "--progress-bar", "on", *requirements]
        code, last = _stream(command, self.env)
        if code:
            raise EngineSessionError(f"cannot install {what}: {last}")

    def local_torch(self) -> str | None:
        """A CPU torch wheel in pip's find-links folders, if any (the newest by name)."""
        wheels = []
        for folder in self.find_links.split():
            path = Path(folder.removeprefix("file://"))
            if path.is_dir():
                wheels += sorted(path.glob("torch-*+cpu-*.whl"))
        return str(wheels[-1]) if wheels else None


def _query(python: str, code: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    result = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    text = (result.stdout if result.returncode == 0 else result.stdout + result.stderr).strip()
    return result.returncode, text.splitlines()[-1] if text else ""


def pinned_requirements(python: str, target: EngineTarget) -> list[str]:
    """The target's runtime distributions at the installed engine's own pins (markers off)."""
    code = (
        "import importlib.metadata as m, json; "
        f"print(json.dumps(m.requires({target.distribution!r}) or []))"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if result.returncode:
        raise EngineSessionError(f"cannot read {target.distribution}'s requirements")
    pins: dict[str, str] = {}
    for line in json.loads(result.stdout):
        spec, _, marker = line.partition(";")
        if "extra ==" in marker:
            continue
        name = re.split(r"[\s\[<>=!~]", spec.strip(), maxsplit=1)[0]
        pins[_normal(name)] = spec.strip()
    return [pins.get(_normal(name), name) for name in target.runtime] + [pins.get("torch", "torch")]


def replace_pins(requirements: list[str], pins: Sequence[str], log: Any) -> list[str]:
    """`requirements` with each ``--pin NAME==VERSION`` in place of the engine's pin of NAME."""
    replaced = list(requirements)
    for pin in pins:
        name = _normal(pin.partition("==")[0])
        where = [
            i for i, r in enumerate(replaced) if _normal(re.split(r"[\s\[<>=!~;]", r)[0]) == name
        ]
        if not where:
            raise EngineSessionError(f"--pin {pin}: the release requires no {name} on a CPU")
        for index in where:
            log(f"--pin: {replaced[index]} replaced by {pin}")
            replaced[index] = pin
    return replaced


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def make_environment(
    target: EngineTarget, options: EngineOptions, python: str, uv: str | None, log: Any
) -> str:
    """Install the engine into the session's environment; returns the installed version."""
    tool = Installer(python, uv)
    if options.from_interpreter:
        log(f"installing nothing: the environment's own {target.name} is used")
    else:
        reason = target.supports(options.version)
        if reason:
            raise EngineSessionError(reason)
        log(f"step 1/3: {target.distribution}=={options.version} without its dependencies")
        tool.install(
            "--no-deps",
            f"{target.distribution}=={options.version}",
            what=f"{target.distribution} {options.version} for this platform/Python",
        )
        torch = tool.local_torch()
        requirements = replace_pins(pinned_requirements(python, target), options.pins, log)
        if torch:
            log(f"step 2/3: torch: the CPU wheel pip's find-links hold ({Path(torch).name})")
            tool.install(torch, what="the local CPU torch wheel")
            requirements = [r for r in requirements if _normal(r.split("=")[0]) != "torch"]
        else:
            log(f"step 2/3: torch at {target.name}'s own pin: {requirements[-1]}")
        log(f"step 3/3: what {target.name}'s modules import on a CPU, and the suite's test needs")
        tool.install(
            *requirements,
            *target.suite,
            what=f"{target.name}'s CPU requirements (a pin the index cannot satisfy can be "
            f"replaced: -- --pin NAME==VERSION)",
        )
    code, version = _query(
        python, f"import importlib.metadata as m; print(m.version({target.distribution!r}))"
    )
    if code:
        raise EngineSessionError(f"no {target.name} in this environment: {version}")
    reason = target.supports(version)
    if reason:
        raise EngineSessionError(reason)
    log(f"{target.name} {version}: probing {', '.join(target.probe_modules)}")
    probe = (
        "import importlib, sys\n"
        f"for name in {list(target.probe_modules)!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        print(f'{name} does not import: {type(error).__name__}: {error}'); sys.exit(1)\n"
    )
    code, error = _query(python, probe, target.environment)
    if code:
        raise EngineSessionError(f"{target.name} {version}: {error}")
    return version


def junit_counts(path: Path) -> dict[str, int]:
    """tests, failures, errors, skipped of a JUnit file (zeros if unreadable)."""
    import xml.etree.ElementTree as ET

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return counts
    for suite in [root] if root.tag == "testsuite" else root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    return counts


def environment_versions(python: str, target: EngineTarget) -> dict[str, str | None]:
    """Versions of the engine, torch and triton in the engine's environment."""
    names = [target.distribution, "torch", "triton", "transformers", "flashinfer-python"]
    code = (
        "import importlib.metadata as m, json\n"
        "def v(n):\n"
        "    try:\n"
        "        return m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        return None\n"
        f"print(json.dumps({{n: v(n) for n in {names!r}}}))"
    )
    status, text = _query(python, code)
    return json.loads(text) if status == 0 else {}


def write_sidecar(
    junit: Path,
    facts_file: Path,
    *,
    target: EngineTarget,
    version: str,
    versions: Mapping[str, str | None],
    exitstatus: int,
    partial: bool,
    pins: Sequence[str] = (),
) -> None:
    """The run's ``.meta.json``: provenance naming the engine release and the builders run."""
    from conformance.runs.provenance import run_facts
    from conformance.runs.sidecar import SIDECAR_FORMAT
    from conformance.runs.sidecar import write_sidecar as write_run_sidecar

    builders: dict[str, Any] = {}
    if facts_file.exists():
        facts = json.loads(facts_file.read_text(encoding="utf-8"))
        builders = {n: b["status"] for n, b in facts.get("builders", {}).items()}
    document = {
        "format": SIDECAR_FORMAT,
        "backend": target.name,
        "kind": target.record.kind,
        "engine": {
            "name": target.name,
            "version": version,
            "builders": builders,
            "pins_replaced": list(pins),
        },
        "junit": junit.name,
        "junit_sha256": hashlib.sha256(junit.read_bytes()).hexdigest() if junit.exists() else None,
        "shard": None,
        "selection": "full" if not partial else "partial",
        "device_kind": target.device_kind,
        "finished": True,
        "exitstatus": exitstatus,
        "facts": facts_file.as_posix(),
        "counts": junit_counts(junit),
        **run_facts(target.device_kind, Path.cwd()),
        "versions": dict(versions),  # the engine's environment, not the interpreter running nox
    }
    write_run_sidecar(junit, document)


def disk_use(path: Path) -> int:
    """Bytes under `path` (files only, links not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def audit_tree(tree: Path, facts_file: Path, log: Any) -> int:
    """``python -m conformance audit TREE --facts FILE``: its output, and its exit code."""
    command = [sys.executable, "-m", "conformance", "audit", str(tree), "--facts", str(facts_file)]
    log(" ".join(["python", *command[1:]]))
    result = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


def uv_binary(venv_backend: str | None) -> str | None:
    """The uv nox uses, where the session's environment was made with uv."""
    if venv_backend != "uv":
        return None
    try:
        from nox.virtualenv import find_uv

        found, path, *_ = find_uv()
    except Exception:
        return shutil.which("uv")
    return path if found else shutil.which("uv")


def run_session(session: Any, target: EngineTarget) -> None:
    """The whole engine session (`session` is nox's); a stop is one line via session.error."""
    started = time.monotonic()
    try:
        options = parse_options(target, session.posargs)
        if options.show_usage:
            session.log(usage(target))
            session.skip("usage shown; nothing installed")
        python = str(Path(session.bin) / "python")
        if options.from_interpreter:
            reach_interpreter(python)
        if _reused_without_install(session) and not options.from_interpreter:
            session.log(f"nox -R: the environment's {target.name} is used as installed")
            options = dataclasses.replace(options, from_interpreter=True)
        version = make_environment(
            target, options, python, uv_binary(session.venv_backend), session.log
        )
    except EngineSessionError as error:
        session.error(str(error))
    JUNIT_DIR.mkdir(parents=True, exist_ok=True)
    FACTS_DIR.mkdir(parents=True, exist_ok=True)
    junit = JUNIT_DIR / target.junit
    facts_file = FACTS_DIR / target.facts_file(version)
    moved = archive_superseded(junit, target.name, None)
    if moved is not None and facts_file.exists():
        shutil.move(str(facts_file), moved / facts_file.name)
    if moved is not None:
        session.log(f"earlier {target.name} reports moved to {moved}")
    session.log(f"step: {target.name} {version}: the families on its own code -> {junit}")
    code, _ = _stream(
        [
            python, "-m", "pytest", target.tests, "-o", "addopts=", "--import-mode=importlib",
            "--strict-markers", "-ra", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
            "-o", f"junit_suite_name=mla-{target.name}", f"--junitxml={junit.as_posix()}",
            *options.pytest_args,
        ],
        {**target.environment, FACTS_ENV: facts_file.as_posix(), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    versions = environment_versions(python, target)
    write_sidecar(
        junit,
        facts_file,
        target=target,
        version=version,
        versions=versions,
        exitstatus=code,
        partial=bool(options.pytest_args),
        pins=options.pins,
    )
    session.log(f"JUnit report: {junit}; facts: {facts_file}")
    audit = audit_tree(options.tree, facts_file, session.log) if options.tree else 0
    elapsed = time.monotonic() - started
    size = disk_use(Path(session.virtualenv.location))
    session.log(
        f"{target.name} session: {elapsed:.0f} s wall time, environment {size / 1e9:.2f} GB"
    )
    if code == 5:
        session.error(f"{target.tests}: no test was collected")
    if code:
        session.error(f"{target.name} {version}: the families failed (pytest exit {code})")
    if audit:
        session.error(f"audit of {options.tree} with {facts_file}: exit {audit}")


def _reused_without_install(session: Any) -> bool:
    """``nox -R`` (or ``--no-install``) on an environment made earlier: install nothing."""
    runner = getattr(session, "_runner", None)
    config = getattr(runner, "global_config", None)
    return bool(getattr(config, "no_install", False)) and bool(
        getattr(getattr(session, "virtualenv", None), "_reused", False)
    )


def reach_interpreter(python: str) -> None:
    """Let the environment see the packages of the interpreter running nox (``.pth``)."""
    import site

    code, purelib = _query(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    if code:
        raise EngineSessionError(f"cannot read the session's site-packages: {purelib}")
    paths = [*site.getsitepackages(), site.getusersitepackages()]
    Path(purelib, "_engine_interpreter_site.pth").write_text("\n".join(paths) + "\n", "utf-8")
