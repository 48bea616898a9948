"""docs/plugins.md tells a plug-in author how to package the backend, what `availability()`
takes and returns, and where every tensor the suite hands over lives — in the suite's own
names (the entry-point group, the `Availability` fields, the record's fields)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from backends.api import Availability
from conformance.metadata.record import BUILDER_REQUIRED_FIELDS
from conformance.targets import ENTRY_POINT_GROUP

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[3]
GUIDE = REPO_ROOT / "docs" / "plugins.md"


def _section(title: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(rf"^###? {re.escape(title)}\n(.*?)(?=^##)", text, re.S | re.M)
    assert found, f"docs/plugins.md has no section {title!r}"
    return found.group(1)


def test_packaging_names_the_entry_point_group_the_registry_reads() -> None:
    packaging = _section("Packaging")
    assert f"`{ENTRY_POINT_GROUP}`" in packaging
    example = (REPO_ROOT / "examples/dense_mla_plugin/pyproject.toml").read_text()
    assert f'[project.entry-points."{ENTRY_POINT_GROUP}"]' in example
    for fact in ("`dependencies`", "torch", "`backends.api`", "MLA_CONFORMANCE_PLUGINS"):
        assert fact in packaging, fact


def test_availability_is_described_with_its_fields() -> None:
    section = _section("Availability and where tensors live")
    fields = [field.name for field in dataclasses.fields(Availability)]
    assert fields == ["available", "reason"]
    assert '`Availability(available, reason="")`' in section
    assert "backend NAME unavailable: <reason>" in section


def test_where_tensors_live_names_real_record_fields() -> None:
    section = _section("Availability and where tensors live")
    named = set(re.findall(r"`(\w+)`", section))
    record_fields = {"query_start_loc", "seq_lens", "block_table_tensor", "slot_mapping"}
    assert record_fields <= named and record_fields <= set(BUILDER_REQUIRED_FIELDS)
    cpu_fields = {"query_start_loc_cpu", "seq_lens_cpu_upper_bound"}
    assert cpu_fields <= named and cpu_fields <= set(BUILDER_REQUIRED_FIELDS)
    assert "`device`" in section and "`device_kind`" in section
