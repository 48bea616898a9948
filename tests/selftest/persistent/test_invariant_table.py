"""The plan-invariant table is whole: every id has a negative control and a line in the docs.

A negative control is a selftest of this folder named ``..._rejected_by_i<N>`` that asserts
on the id ``"I<N>"``; docs/planner.md's "Plan invariants" section lists each id once, in the
table's order, with the table's own line of doc.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conformance.persistent.invariants import INVARIANTS

from doc_lists import listed_rules

pytestmark = pytest.mark.selftest

HERE = Path(__file__).parent
CONTROL = re.compile(r"^test_\w+_rejected_by_(i\d+)$")


def negative_controls() -> dict[str, list[str]]:
    """id -> the selftests named as its negative controls that assert on that id."""
    found: dict[str, list[str]] = {}
    for path in sorted(HERE.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            match = CONTROL.match(getattr(node, "name", ""))
            if not isinstance(node, ast.FunctionDef) or match is None:
                continue
            invariant = match.group(1).upper()
            literals = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value}
            if invariant in literals:
                found.setdefault(invariant, []).append(f"{path.name}::{node.name}")
    return found


def test_ids_are_unique_and_checks_named_after_them() -> None:
    ids = [invariant.code for invariant in INVARIANTS]
    assert len(set(ids)) == len(ids), ids
    for invariant in INVARIANTS:
        assert invariant.check.__name__.startswith(f"check_{invariant.code.lower()}_"), invariant


def test_every_invariant_has_a_negative_control() -> None:
    controls = negative_controls()
    ids = [invariant.code for invariant in INVARIANTS]
    assert [i for i in ids if not controls.get(i)] == [], controls
    assert sorted(set(controls) - set(ids)) == [], "controls of ids the table does not hold"


def test_docs_list_exactly_the_table() -> None:
    table = [(invariant.code, invariant.doc) for invariant in INVARIANTS]
    assert listed_rules("planner.md", "Plan invariants") == table
