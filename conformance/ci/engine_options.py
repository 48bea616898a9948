"""The engine session's arguments: ``nox -s <engine> -- [options] [pytest arguments]``.

`parse_options` checks every argument before anything is installed or moved; a bad one is an
`EngineUsageError` (one line; the session exits 2). ``--tree PATH`` must be a tree of the
engine (`conformance.engines.tree`); ``--<engine>-from-interpreter`` and an explicit
``--<engine>-version`` must name the same release (checked once the interpreter's is known).
`selection_reason` tells a partial selection (``-k``, ``-m``, ``--deselect``, ``--ignore``,
node ids or paths below the engine's tests) from a full run, as the backend sessions do.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.engines.tree import find_root
from conformance.target_types import EngineTarget


class EngineSessionError(RuntimeError):
    """Why the engine session cannot go on, in one line."""


class EngineUsageError(EngineSessionError):
    """A bad argument of the engine session (exit 2)."""


USAGE_EXIT = 2
SELECTING = ("-k", "-m", "--deselect", "--ignore", "--ignore-glob")
# pytest options whose value is the next argument (so the value is not a path)
_TAKES_VALUE = frozenset(
    {*SELECTING, "-p", "-o", "-W", "-c", "-n", "-r", "--tb", "--maxfail", "--rootdir"}
    | {"--durations", "--basetemp", "--confcutdir", "--log-level", "--override-ini"}
)


@dataclass(frozen=True)
class EngineOptions:
    version: str
    from_interpreter: bool
    tree: Path | None
    pytest_args: tuple[str, ...]
    show_usage: bool = False
    pins: tuple[str, ...] = ()
    version_given: bool = False
    """Whether ``--<engine>-version`` was on the command line (not the default)."""


def usage(target: EngineTarget) -> str:
    """What ``nox -s <name> -- --help`` prints (before anything is installed)."""
    name = target.option
    return "\n".join(
        [
            f"usage: nox -s {name} -- [--{name}-version X | --{name}-from-interpreter]"
            " [--tree PATH] [PYTEST ARGS]",
            f"  --{name}-version X          the release to install (default"
            f" {target.version}; supported: >= {target.min_version},"
            f" < {target.below_version})",
            f"  --{name}-from-interpreter   exactly the {name} of the interpreter that runs"
            f" nox (with --{name}-version, the two must agree)",
            "  --pin NAME==VERSION       replace the release's own pin of NAME (one the package"
            " index cannot satisfy); recorded in the sidecar",
            f"  --tree PATH               then audit the {name} tree at PATH with the facts"
            " just measured",
            f"  anything else goes to pytest ({target.tests}); a selection (-k, -m, node ids)"
            " writes a partial report; see docs/engines.md",
        ]
    )


def _tree(target: EngineTarget, value: str) -> Path:
    tree = Path(value)
    if not tree.is_dir():
        raise EngineUsageError(f"--tree {value}: not a directory")
    if find_root(tree, target.distribution) is None:
        raise EngineUsageError(
            f"--tree {value}: not a {target.name} tree (no {target.distribution}/ package, "
            f"PKG-INFO or pyproject.toml of {target.distribution} in it or above it)"
        )
    return tree


def parse_options(target: EngineTarget, posargs: Sequence[str]) -> EngineOptions:
    """``--<name>-version X``, ``--<name>-from-interpreter``, ``--tree PATH``, ``--pin``,
    ``-h``/``--help`` (usage only); the rest goes to pytest."""
    version, from_interpreter, tree, rest = target.version, False, None, []
    pins: list[str] = []
    given = False
    args = list(posargs)
    while args:
        arg = args.pop(0)
        key, _, value = arg.partition("=")
        if key in (f"--{target.option}-version", "--tree", "--pin") and not value:
            if not args:
                raise EngineUsageError(f"{key} needs a value")
            value = args.pop(0)
        if key == f"--{target.option}-version":
            version, given = value, True
        elif key == "--tree":
            tree = _tree(target, value)
        elif key == "--pin":
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+", value):
                raise EngineUsageError(f"--pin {value!r}: expected NAME==VERSION")
            pins.append(value)
        elif arg == f"--{target.option}-from-interpreter":
            from_interpreter = True
        elif arg in ("-h", "--help"):
            return EngineOptions(version, from_interpreter, tree, (), show_usage=True)
        else:
            rest.append(arg)
    if (given or not from_interpreter) and not re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+-]*)", version):
        raise EngineUsageError(f"--{target.option}-version {version!r}: not a release number")
    if from_interpreter and pins:
        raise EngineUsageError(
            f"--pin with --{target.option}-from-interpreter: nothing is installed to pin"
        )
    return EngineOptions(
        version, from_interpreter, tree, tuple(rest), pins=tuple(pins), version_given=given
    )


def check_interpreter_version(target: EngineTarget, options: EngineOptions, found: str) -> None:
    """Refuse a ``--<name>-version`` that is not the interpreter's own release."""
    if options.version_given and found != options.version:
        raise EngineUsageError(
            f"--{target.option}-version {options.version} conflicts with "
            f"--{target.option}-from-interpreter: the interpreter's {target.name} is {found}"
        )


def _covers(arg: str, tests: str) -> bool:
    """Whether a positional argument names the engine's tests folder or one above it."""
    if "::" in arg:
        return False
    path, folder = Path(arg).resolve(), Path(tests).resolve()
    return path == folder or path in folder.parents


def selection_reason(target: EngineTarget, pytest_args: Sequence[str]) -> str | None:
    """Why these pytest arguments select part of the engine's tests (None: all of them)."""
    reasons: list[str] = []
    args = list(pytest_args)
    while args:
        arg = args.pop(0)
        key, equals, value = arg.partition("=")
        if not equals and not arg.startswith("--") and arg[:2] in _TAKES_VALUE and len(arg) > 2:
            key, value, equals = arg[:2], arg[2:], "="  # -kfoo
        if key in _TAKES_VALUE:
            if not equals:
                value = args.pop(0) if args else ""
            if key in SELECTING:
                reasons.append(f"{key} {value}")
        elif not arg.startswith("-") and not _covers(arg, target.tests):
            reasons.append(f"selected {arg}")
    return "; ".join(reasons) or None
