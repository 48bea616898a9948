"""The audit's rule table and docs/audit.md are held together: the "Rules" table lists every
rule of `RULES` once, in order, with its default severity, and the page names no code the
table does not hold."""

from __future__ import annotations

import re

import pytest

from conformance.audit import RULES

from doc_lists import ROOT, tabled_rules

pytestmark = pytest.mark.selftest

_CODE = re.compile(r"\b(?:CAM|STUB)\d{3}\b")


def test_the_rules_table_lists_every_rule_with_its_default_severity() -> None:
    listed = [(code, level) for code, level, *_ in tabled_rules("audit.md", "Rules")]
    assert listed == [(rule.code, rule.severity) for rule in RULES.values()]


def test_the_page_names_no_code_the_table_lacks() -> None:
    text = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    assert sorted(set(_CODE.findall(text)) - set(RULES)) == []
