"""Configuration as ruff users expect it: select / ignore / per-file-ignores, severities,
``fail-on``, from ``[tool.mla-conformance.audit]`` in ``pyproject.toml`` and the command line.

Selectors are code prefixes (``CAM``, ``STUB00``, ``CAM002``) or ``ALL``. A code is
reported when the longest selector matching it comes from ``select`` (ties: ``ignore``
wins). ``per-file-ignores`` maps a glob (matched against the file's path relative to the
configuration file's folder, and against its path below its PATH) to selectors.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from conformance.audit.findings import RULES, SEVERITIES, Finding
from conformance.errors import ConformanceError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: no TOML reader in the standard library
    tomllib = None  # type: ignore[assignment]

TABLE = ("tool", "mla-conformance", "audit")
_KEYS = frozenset(
    {
        "select",
        "ignore",
        "per-file-ignores",
        "severity",
        "fail-on",
        "exclude",
        "max-file-size",
        "baseline",
    }
)


class ConfigError(ConformanceError, ValueError):
    """A bad configuration value; names the file (or option) and the key."""


@dataclass(frozen=True)
class Config:
    """The effective configuration of one run."""

    select: tuple[str, ...] = ("ALL",)
    ignore: tuple[str, ...] = ()
    per_file_ignores: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    severity: Mapping[str, str] = field(default_factory=dict)
    fail_on: str = "error"
    """The least severe level that makes the audit exit 1."""
    exclude: tuple[str, ...] = ()
    max_file_size: int | None = None
    baseline: str | None = None
    root: str = "."
    """The folder of the configuration file (per-file-ignores and baseline are relative to it)."""
    source: str = "defaults"

    def selected(self, code: str) -> bool:
        """Whether `code` is reported at all."""
        return _wins(code, self.select, self.ignore)

    def severity_of(self, code: str) -> str:
        return self.severity.get(code) or RULES[code].severity

    def fails(self, finding: Finding) -> bool:
        """Whether `finding` makes the audit exit 1."""
        return SEVERITIES.index(finding.severity) <= SEVERITIES.index(self.fail_on)

    def apply(self, finding: Finding) -> Finding | None:
        """`finding` with its configured severity, or None when deselected or ignored here."""
        if not self.selected(finding.code):
            return None
        if finding.file:
            relative = os.path.relpath(os.path.abspath(finding.file), os.path.abspath(self.root))
            names = {relative.replace(os.sep, "/"), finding.relpath, finding.path}
            for pattern, codes in self.per_file_ignores.items():
                if any(fnmatch.fnmatch(n, pattern) for n in names) and any(
                    _matches(finding.code, c) for c in codes
                ):
                    return None
        return finding.with_severity(self.severity_of(finding.code))


def _matches(code: str, selector: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


def _wins(code: str, select: Sequence[str], ignore: Sequence[str]) -> bool:
    best_select = max(
        (len(s) if s != "ALL" else 0 for s in select if _matches(code, s)), default=-1
    )
    best_ignore = max(
        (len(s) if s != "ALL" else 0 for s in ignore if _matches(code, s)), default=-1
    )
    return best_select >= 0 and best_select > best_ignore


def _selectors(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of rule codes or prefixes")
    for selector in value:
        if selector != "ALL" and not any(code.startswith(selector) for code in RULES):
            raise ConfigError(f"{where}: {selector!r} matches no rule (rules: {', '.join(RULES)})")
    return tuple(value)


def find_pyproject(paths: Sequence[str]) -> str | None:
    """The nearest ``pyproject.toml`` holding the table, from the first PATH upwards."""
    if not paths or tomllib is None:
        return None
    folder = os.path.abspath(paths[0])
    if not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    while True:
        candidate = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(candidate):
            try:
                with open(candidate, "rb") as handle:
                    data = tomllib.load(handle)
            except (OSError, tomllib.TOMLDecodeError):
                data = {}
            if _table(data) is not None:
                return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _table(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    node: Any = data
    for key in TABLE:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, Mapping) else None


def load_config(path: str) -> Config:
    """Read ``[tool.mla-conformance.audit]`` from `path`; `ConfigError` names file and key."""
    if tomllib is None:
        raise ConfigError(f"{path}: reading pyproject.toml needs Python 3.11 or later (tomllib)")
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    table = _table(data) or {}
    where = f"{path}: [tool.mla-conformance.audit]"
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} (known: {sorted(_KEYS)})")
    config = Config(root=os.path.dirname(os.path.abspath(path)), source=path)
    return merge(config, table, where)


def merge(config: Config, table: Mapping[str, Any], where: str) -> Config:
    """`config` updated with the keys of `table` (the file's table, or the CLI's)."""
    changes: dict[str, Any] = {}
    if "select" in table:
        changes["select"] = _selectors(table["select"], f"{where} select")
    if "ignore" in table:
        changes["ignore"] = (*config.ignore, *_selectors(table["ignore"], f"{where} ignore"))
    if "per-file-ignores" in table:
        value = table["per-file-ignores"]
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} per-file-ignores: expected a table of glob = [codes]")
        merged = dict(config.per_file_ignores)
        merged.update(
            {str(k): _selectors(v, f"{where} per-file-ignores {k!r}") for k, v in value.items()}
        )
        changes["per_file_ignores"] = merged
    if "severity" in table:
        value = table["severity"]
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} severity: expected a table of CODE = level")
        levels = dict(config.severity)
        for code, level in value.items():
            if code not in RULES or level not in SEVERITIES:
                raise ConfigError(
                    f"{where} severity: {code} = {level!r}: expected a rule code and one "
                    f"of {list(SEVERITIES)}"
                )
            levels[code] = level
        changes["severity"] = levels
    if "fail-on" in table:
        if table["fail-on"] not in SEVERITIES:
            raise ConfigError(f"{where} fail-on: expected one of {list(SEVERITIES)}")
        changes["fail_on"] = table["fail-on"]
    if "exclude" in table:
        value = table["exclude"]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} exclude: expected a list of globs")
        changes["exclude"] = (*config.exclude, *value)
    if "max-file-size" in table:
        value = table["max-file-size"]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{where} max-file-size: expected a positive number of bytes")
        changes["max_file_size"] = value
    if "baseline" in table:
        if not isinstance(table["baseline"], str):
            raise ConfigError(f"{where} baseline: expected a file path")
        changes["baseline"] = os.path.join(config.root, table["baseline"])
    return replace(config, **changes)
