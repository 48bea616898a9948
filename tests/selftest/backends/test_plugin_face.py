"""One face for plug-in authors (`backends.api`)."""

from __future__ import annotations

import ast
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
