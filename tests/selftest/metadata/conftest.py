"""Fixtures of the metadata selftests: a validator with one rule broken or dropped."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from conformance.metadata import validator
from conformance.metadata.checked import Checked

SwapRule = Callable[[str, Callable[[Checked], None] | None], None]


@pytest.fixture
def swap_rule(monkeypatch: pytest.MonkeyPatch) -> SwapRule:
    """`swap_rule(code, check)`: run `validate` with rule `code`'s check replaced by
    `check`, or dropped from `validator.RULES` when `check` is None (undone after the test)."""

    def swap(code: str, check: Callable[[Checked], None] | None = None) -> None:
        assert code in {rule.code for rule in validator.RULES}, code
        rules = tuple(
            rule if rule.code != code else dataclasses.replace(rule, check=check)
            for rule in validator.RULES
            if rule.code != code or check is not None
        )
        monkeypatch.setattr(validator, "RULES", rules)

    return swap
