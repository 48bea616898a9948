"""One face for plug-in authors (`backends.api`), and old paths that warn before they go."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

import backends.api as api
from backends import base, common
from conformance.stubs import protocol

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = REPO_ROOT / "examples" / "dense_mla_plugin" / "src" / "dense_mla"


def test_the_face_re_exports_what_plug_ins_used_from_three_modules() -> None:
    for module, names in (
        (base, ("Backend", "Availability", "DecodeMetadata", "DecodeScales", "MetadataBuilder",
                "BuilderConfig", "KVCacheSpec", "csr_arguments", "require_plan", "AITER_V1")),
        (common, ("PlanFreeBuilder", "MLACommonBuilder", "PlanExecutingBackend")),
        (protocol, ("MLA_BUILDER_LAYER_PROTOCOL", "MLAAttentionLayer")),
    ):  # fmt: skip
        for name in names:
            assert getattr(api, name) is getattr(module, name), name
            assert name in api.__all__, name


def test_the_example_plug_in_imports_the_suite_only_through_the_face() -> None:
    suite_imports = set()
    for path in EXAMPLE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[0] in ("backends", "conformance", "kernels"):
                    suite_imports.add(node.module)
    assert suite_imports == {"backends.api"}


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("conformance.harness.sharding", "conformance.runs.names", "junit_name"),
        ("conformance.harness.expectations", "conformance.runs.expectations", "load_expectations"),
        ("conformance.harness.provenance", "conformance.runs.provenance", "git_facts"),
        ("conformance.signoff.atomic", "conformance.runs.atomic", "atomic_write_text"),
        ("conformance.signoff.outputs", "conformance.runs.outputs", "move_outputs"),
        ("conformance.harness.archive", "conformance.runs.archive", "archive_superseded"),
    ],
)
def test_a_moved_module_still_works_and_warns(old: str, new: str, name: str) -> None:
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any(old in text and new in text for text in messages), messages
