"""``nox -s vllm``: make an engine's environment, run its tests, keep its reports and facts.

Steps, each logged: check the arguments; install the engine release with ``--no-deps``
(``-- --vllm-version X``; or use the interpreter's own with ``-- --vllm-from-interpreter``),
then torch (a CPU wheel where pip's find-links hold one, else the engine's own pin) and the
distributions its modules import on a CPU at the engine's own pins; probe the modules the
target needs; run its tests (JUnit ``reports/junit/<name>.xml`` and a ``.meta.json``
sidecar); write the facts file under ``reports/engines/``; print the wall time and the
environment's disk use; a full run records the facts file's sha256 in
``reports/engines/SHA256SUMS``. ``-- --tree PATH`` then audits that tree with the facts. A
selection (``-k``, node ids) writes under ``reports/junit/partial/`` and
``reports/engines/partial/`` instead. Anything that stops the run is one line
(`EngineSessionError`; a bad argument, `EngineUsageError`, exits 2), never a traceback.
Arguments: `conformance.ci.engine_options`; what the run leaves: `conformance.ci.engine_report`.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conformance.ci import installer
from conformance.ci.engine_options import (
    USAGE_EXIT,
    EngineOptions,
    EngineSessionError,
    EngineUsageError,
    check_interpreter_version,
    parse_options,
    selection_reason,
    usage,
)
from conformance.ci.engine_report import (
    audit_tree,
    disk_use,
    environment_versions,
    write_sidecar,
)
from conformance.engines.releases import write_manifest
from conformance.runs.archive import archive_superseded
from conformance.runs.names import PARTIAL_DIR, junit_name, partial_junit_path
from conformance.target_types import EngineTarget

REPORTS = Path("reports")
JUNIT_DIR = REPORTS / "junit"
FACTS_DIR = REPORTS / "engines"
FACTS_ENV = "MLA_ENGINE_FACTS"
SUITE_PACKAGES = ("backends", "kernels", "conformance", "benchmarks")
"""The suite's top-level packages: run from its checkout, they shadow any installed
distribution of the same import name (Hugging Face's ``kernels``, which transformers then
imports from the suite's folder)."""
PROBE = (
    "import importlib, sys\n"
    "for name in {modules!r}:\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except Exception as error:\n"
    "        print(f'{{name}} does not import: {{type(error).__name__}}: {{error}}')\n"
    "        sys.exit(1)\n"
)
"""The probe: the first module of ``modules`` that does not import is the reason."""
SHADOW_CHECK = (
    "import importlib.metadata, sys\n"
    f"for name in {SUITE_PACKAGES!r}:\n"
    "    try:\n"
    "        found = importlib.metadata.distribution(name)\n"
    "    except importlib.metadata.PackageNotFoundError:\n"
    "        continue\n"
    "    print(f'the environment has the distribution {name} {found.version}, which the "
    "suite\\'s own {name}/ package shadows (a library importing it gets the suite\\'s); "
    "uninstall it there (docs/engines.md)'); sys.exit(1)\n"
)


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
    target: EngineTarget,
    options: EngineOptions,
    python: str,
    uv: str | None,
    log: Any,
    *,
    install: bool = True,
) -> str:
    """Install the engine into the session's environment (unless not `install`); returns the
    version the environment imports."""
    tool = Installer(python, uv)
    if options.from_interpreter:
        log(f"installing nothing: the interpreter's own {target.name} is used")
    elif not install:
        log(f"installing nothing: the environment's own {target.name} is used")
    else:
        reason = target.supports(options.version)
        if reason:
            raise EngineSessionError(reason)
        if target.whole_install:
            log(f"step 1/1: {target.distribution}=={options.version} with its dependencies")
            tool.install(
                f"{target.distribution}=={options.version}",
                *target.suite,
                what=f"{target.distribution} {options.version} and its GPU stack",
            )
            return _installed_version(python, target, options, log)
        log(f"step 1/3: {target.distribution}=={options.version} without its dependencies")
        tool.install(
            "--no-deps",
            f"{target.distribution}=={options.version}",
            what=f"{target.distribution} {options.version} for this platform/Python",
        )
        torch = tool.local_torch()
        pins = (*target.release_pins(options.version), *options.pins)
        requirements = replace_pins(pinned_requirements(python, target), pins, log)
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
    return _installed_version(python, target, options, log)


def _installed_version(python: str, target: EngineTarget, options: EngineOptions, log: Any) -> str:
    """The engine version the environment imports, once its probe modules import."""
    code, version = _query(
        python, f"import importlib.metadata as m; print(m.version({target.distribution!r}))"
    )
    if code:
        raise EngineSessionError(f"no {target.name} in this environment: {version}")
    if options.version_given and version != options.version:
        raise EngineUsageError(
            f"--{target.option}-version {options.version}: the environment holds {target.name} "
            f"{version} (nox -R reuses it as installed; run without -R to install it)"
        )
    reason = target.supports(version)
    if reason:
        raise EngineSessionError(reason)
    log(f"{target.name} {version}: probing {', '.join(target.probe_modules)}")
    probe = SHADOW_CHECK + PROBE.format(modules=list(target.probe_modules))
    code, error = _query(python, probe, target.environment)
    if code:
        raise EngineSessionError(f"{target.name} {version}: {error}")
    return version


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


def _usage_exit() -> None:
    """Make nox's process end with the usage status once nox has printed its summary."""

    def _exit() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(USAGE_EXIT)

    atexit.register(_exit)


def prepare(
    session: Any, target: EngineTarget, release: str | None = None
) -> tuple[EngineOptions, str, str]:
    """Check the arguments and make the environment: (options, its python, engine version);
    a `release` of the matrix comes before the session's own arguments."""
    fixed = [f"--{target.option}-version", release] if release else []
    options = parse_options(target, [*fixed, *session.posargs])
    if options.show_usage:
        session.log(usage(target))
        session.skip("usage shown; nothing installed")
    python = str(Path(session.bin) / "python")
    origin = None
    if options.from_interpreter:
        found, origin = interpreter_engine(target)
        check_interpreter_version(target, options, found)
        reach_interpreter(python)
    reused = _reused_without_install(session) and not options.from_interpreter
    if reused:
        session.log(f"nox -R: the environment's {target.name} is used as installed")
    version = make_environment(
        target, options, python, uv_binary(session.venv_backend), session.log, install=not reused
    )
    if origin is not None:
        same_engine(python, target, origin)
    return options, python, version


def run_and_record(
    target: EngineTarget, options: EngineOptions, python: str, version: str, log: Any
) -> tuple[int, Path]:
    """Run the target's tests with `python`; write the JUnit report and its sidecar (a full
    run: the former ones archived first). Returns pytest's exit code and the facts file."""
    reason = selection_reason(target, options.pytest_args)
    junit = JUNIT_DIR / junit_name(target.name, None)
    facts_file = facts_path(target, version)
    if reason is not None:
        junit, facts_file = partial_junit_path(junit), FACTS_DIR / PARTIAL_DIR / facts_file.name
        log(f"partial selection ({reason}): the full report and facts stay as they are")
    junit.parent.mkdir(parents=True, exist_ok=True)
    facts_file.parent.mkdir(parents=True, exist_ok=True)
    moved = archive_superseded(junit, target.name, None) if reason is None else None
    if moved is not None and facts_file.exists():
        shutil.move(str(facts_file), moved / facts_file.name)
    if moved is not None:
        log(f"earlier {target.name} reports moved to {moved}")
    log(f"step: {target.name} {version}: the families on its own code -> {junit}")
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
        selection=reason,
        pins=(*target.release_pins(version), *options.pins),
    )
    if reason is None and code == 0 and target.measures_facts and facts_file.exists():
        manifest = write_manifest(FACTS_DIR, [facts_file.name])
        log(f"facts checksum recorded in {manifest}")
    log(f"JUnit report ({'partial' if reason else 'full'}): {junit}; facts: {facts_file}")
    return code, facts_file


def run_session(session: Any, target: EngineTarget, *, release: str | None = None) -> None:
    """The whole engine session (`session` is nox's); a stop is one line via session.error
    (a bad argument: exit 2). A full run records its facts file in ``SHA256SUMS``."""
    started = time.monotonic()
    try:
        options, python, version = prepare(session, target, release)
    except EngineUsageError as error:
        _usage_exit()
        session.error(str(error))
    except EngineSessionError as error:
        session.error(str(error))
    code, facts_file = run_and_record(target, options, python, version, session.log)
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


def facts_path(target: EngineTarget, version: str) -> Path:
    """Where the target's tests write their facts (or, measuring none, their statuses)."""
    folder = FACTS_DIR if target.measures_facts else JUNIT_DIR
    return folder / target.facts_file(version)


def _reused_without_install(session: Any) -> bool:
    """``nox -R`` (or ``--no-install``) on an environment made earlier: install nothing."""
    runner = getattr(session, "_runner", None)
    config = getattr(runner, "global_config", None)
    return bool(getattr(config, "no_install", False)) and bool(
        getattr(getattr(session, "virtualenv", None), "_reused", False)
    )


def interpreter_engine(target: EngineTarget) -> tuple[str, str]:
    """(version, package folder) of the engine of the interpreter running nox; one line if
    it has none."""
    code = (
        "import importlib.metadata as m, importlib.util as u, os; "
        f"s = u.find_spec({target.distribution!r}); "
        f"print(m.version({target.distribution!r}), os.path.dirname(s.origin))"
    )
    status, text = _query(sys.executable, code)
    if status or " " not in text:
        raise EngineSessionError(
            f"--{target.option}-from-interpreter: the interpreter running nox ({sys.executable}) "
            f"has no {target.distribution}; install it there, or use --{target.option}-version X"
        )
    version, _, origin = text.partition(" ")
    return version, origin


def same_engine(python: str, target: EngineTarget, origin: str) -> None:
    """Refuse an environment that imports another copy of the engine than `origin`."""
    code = (
        "import importlib.util as u, os; "
        f"print(os.path.dirname(u.find_spec({target.distribution!r}).origin))"
    )
    status, found = _query(python, code)
    if status or os.path.realpath(found) != os.path.realpath(origin):
        raise EngineSessionError(
            f"--{target.option}-from-interpreter: the session imports {target.distribution} from "
            f"{found or 'nowhere'}, not the interpreter's {origin}"
        )


def reach_interpreter(python: str) -> None:
    """Let the environment import the packages of the interpreter running nox *before* its
    own (``.pth``): whatever an earlier run installed there never shadows them."""
    import site

    code, purelib = _query(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    if code:
        raise EngineSessionError(f"cannot read the session's site-packages: {purelib}")
    paths = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if p != purelib]
    line = (
        f"import sys; _own = {purelib!r}; _at = sys.path.index(_own) if _own in sys.path "
        f"else len(sys.path); sys.path[_at:_at] = [p for p in {paths!r} if p not in sys.path]"
    )
    Path(purelib, "_engine_interpreter_site.pth").write_text(line + "\n", "utf-8")


MAIN_USAGE = (
    "usage: python -m conformance.ci.engine_session NAME [--tree PATH] [pytest arguments]\n"
    "  the engine target NAME's tests with this interpreter's engine, installing nothing"
)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m conformance.ci.engine_session NAME [options]``: the target's tests with this
    interpreter's engine, installing nothing (a machine without nox or internet, such as a GPU
    machine given vLLM's bundle); the options of ``nox -s NAME`` less the installing ones."""
    from conformance.engines.target import engine_target

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        print(MAIN_USAGE, file=sys.stderr)
        return USAGE_EXIT
    try:
        target = engine_target(args[0])
    except KeyError as error:
        print(f"engine_session: {error.args[0]}", file=sys.stderr)
        return USAGE_EXIT
    installing = [a for a in args[1:] if a.startswith((f"--{target.option}-version", "--pin"))]
    if installing:
        print(
            f"engine_session: {installing[0]}: this command installs nothing; it runs the "
            f"{target.distribution} this interpreter imports (nox -s {target.name} installs one)",
            file=sys.stderr,
        )
        return USAGE_EXIT
    if importlib.util.find_spec(target.distribution) is None:
        print(
            f"engine_session: this interpreter ({sys.executable}) has no {target.distribution}; "
            f"install it, or put a bundle on PYTHONPATH (scripts/gpu_vllm.sh does)",
            file=sys.stderr,
        )
        return 1
    try:
        options = parse_options(target, [*args[1:], f"--{target.option}-from-interpreter"])
        version = _installed_version(sys.executable, target, options, print)
    except EngineUsageError as error:
        print(f"engine_session: {error}", file=sys.stderr)
        return USAGE_EXIT
    except EngineSessionError as error:
        print(f"engine_session: {error}", file=sys.stderr)
        return 1
    code, _ = run_and_record(target, options, sys.executable, version, print)
    return code


if __name__ == "__main__":
    sys.exit(main())
