"""``MLA_CONFORMANCE_PLUGINS``: what the backend sessions install before they run."""

from __future__ import annotations

import pytest

from conformance.harness.plugins_env import PLUGINS_ENV, install_plugins, plugin_requirements

pytestmark = pytest.mark.selftest


def test_requirements_are_split_shell_style() -> None:
    env = {PLUGINS_ENV: "examples/dense_mla_plugin 'my backend==1.0' ./w.whl"}
    assert plugin_requirements(env) == ["examples/dense_mla_plugin", "my backend==1.0", "./w.whl"]


def test_nothing_is_installed_without_the_variable() -> None:
    calls: list[tuple[str, ...]] = []
    assert install_plugins(lambda *r: calls.append(r), {}) == []
    assert install_plugins(lambda *r: calls.append(r), {PLUGINS_ENV: "  "}) == []
    assert calls == []


def test_the_installer_gets_every_requirement_at_once() -> None:
    calls: list[tuple[str, ...]] = []
    install_plugins(lambda *r: calls.append(r), {PLUGINS_ENV: "a b"})
    assert calls == [("a", "b")]


def test_a_bad_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match=f"{PLUGINS_ENV}: cannot split"):
        plugin_requirements({PLUGINS_ENV: "'unclosed"})
