"""Negative controls of family A: broken factories, builders and transformations.

Each runs the real family-A module (tests/conformance/test_metadata.py) in-process with
one deliberately broken piece and requires the run to fail, naming the field.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from backends import common, registry
from backends.base import MetadataBuilder, PrefillMetadata
from backends.cpu import CpuReferenceBackend, CpuReferenceBuilder
from conformance.audit import construction
from conformance.errors import MetadataError
from conformance.metadata import batch, transforms
from conformance.metadata import record as metadata
from conformance.metadata import validator as validate_module
from conformance.metadata.record import CommonAttentionMetadata

MLA_BUILDER = str(Path(metadata.__file__).parents[2] / "backends" / "common.py")

FAMILY_A = Path(__file__).resolve().parents[2] / "conformance" / "test_metadata.py"


def family_a_fails(
    pytester: pytest.Pytester,
    select: str,
    *lines: str,
    failed: int = 0,
    at_least: int = 1,
    backend: str = "cpu",
) -> None:
    """Run the family-A tests matching `select` in-process against the current (patched)
    implementation; require `failed` failures (or `at_least`) and `lines`, in order."""
    args = ("-p", "no:cacheprovider", "--backend", backend, "-k", select)
    result = pytester.runpytest_inprocess(str(FAMILY_A), *args)
    outcomes = result.parseoutcomes()
    count = outcomes.get("failed", 0)
    assert count == failed if failed else count >= at_least, outcomes
    if lines:
        result.stdout.fnmatch_lines(list(lines), consecutive=False)


def test_factory_dropping_the_upper_bound_fails_family_a(pytester, monkeypatch):
    real = batch.make_cam

    def drops_upper_bound(*args, **kwargs) -> CommonAttentionMetadata:
        return real(*args, **kwargs).replace(seq_lens_cpu_upper_bound=None)

    monkeypatch.setattr(batch, "make_cam", drops_upper_bound)
    family_a_fails(pytester, "accepts_factory_output and prefill", "*seq_lens_cpu_upper_bound*")


class IgnoresUpperBoundBuilder(CpuReferenceBuilder):
    """Computes prefill context from seq_lens and never looks at the upper bound."""

    def build(self, cam: CommonAttentionMetadata):
        return super().build(cam.replace(seq_lens_cpu_upper_bound=cam.seq_lens.cpu().clone()))

    def _build_prefill(self, cam: CommonAttentionMetadata) -> PrefillMetadata:
        return super()._build_prefill(cam.replace(seq_lens_cpu_upper_bound=cam.seq_lens.cpu()))


class IgnoresUpperBoundBackend(CpuReferenceBackend):
    name: ClassVar[str] = "ignores-upper-bound"

    def builder_cls(self) -> type[MetadataBuilder]:
        return IgnoresUpperBoundBuilder


def test_builder_ignoring_the_upper_bound_fails_family_a(pytester, monkeypatch):
    broken = IgnoresUpperBoundBackend()
    real = registry.get_backend
    monkeypatch.setattr(
        registry, "get_backend", lambda name: broken if name == broken.name else real(name)
    )
    family_a_fails(
        pytester,
        "upper_bound or missing_field",
        "FAILED *test_missing_field_names_itself[[]seq_lens_cpu_upper_bound[]]*",
        "FAILED *test_builder_rejects_upper_bound_below_seq_lens*",
        at_least=2,
        backend=broken.name,
    )


def test_transformation_losing_a_field_fails_family_a(pytester, monkeypatch):
    real = transforms.slice_requests

    def loses_positions(*args, **kwargs) -> CommonAttentionMetadata:
        return real(*args, **kwargs).replace(positions=None)

    monkeypatch.setattr(transforms, "slice_requests", loses_positions)
    family_a_fails(pytester, "optional_field_survives", "*dropped 'positions'*", failed=4)


def test_new_cam_field_fails_the_pinned_field_set(pytester, monkeypatch):
    real = metadata.cam_field_names
    monkeypatch.setattr(metadata, "cam_field_names", lambda: (*real(), "new_field"))
    family_a_fails(
        pytester,
        "cam_field_set_is_pinned",
        "*fields changed (added [[]'new_field'[]], removed [[][]])*",
        "*conformance/metadata/batch.py:*",
        failed=1,
    )


def test_unexercised_construction_site_fails_family_a(pytester, monkeypatch):
    real = construction.find_construction_sites

    def with_an_unexercised_site(*args, **kwargs) -> list[construction.ConstructionSite]:
        sites = real(*args, **kwargs)
        return [*sites, dataclasses.replace(sites[0], qualname="rogue_factory")]

    monkeypatch.setattr(construction, "find_construction_sites", with_an_unexercised_site)
    family_a_fails(
        pytester,
        "every_construction_site_is_exercised",
        "*without an exercising call: [[]'*::rogue_factory'[]]*",
        failed=1,
    )


def test_construction_site_missing_a_field_fails_family_a(pytester, monkeypatch, tmp_path):
    broken = tmp_path / "benchmarks" / "runner.py"
    broken.parent.mkdir()
    broken.write_text(
        "from backends.common import MLACommonBuilder\n"
        "from conformance.metadata.record import CommonAttentionMetadata\n\n\n"
        "def build(**required):  # feeds MLACommonBuilder\n"
        "    return MLACommonBuilder, CommonAttentionMetadata(\n"
        + "".join(f"        {name}=required[{name!r}],\n" for name in metadata.REQUIRED_FIELDS)
        + "    )\n"
    )
    real = construction.audit_construction
    monkeypatch.setattr(
        construction,
        "audit_construction",
        # The record's definition and a consumer (the MLA builder) travel with the tree.
        lambda *a, **k: [*real(*a, **k), *real([tmp_path, metadata.__file__, MLA_BUILDER])],
    )
    family_a_fails(
        pytester,
        "construction_audit_is_clean",
        f"*{broken}:6: CAM001 *seq_lens_cpu_upper_bound*",
        failed=1,
    )


def test_validator_accepting_an_unordered_batch_fails_family_a(pytester, monkeypatch):
    real = validate_module.validate

    def ignores_order(cam, **kwargs) -> None:
        """BROKEN: a validator without the decodes-first ordering check."""
        try:
            real(cam, **kwargs)
        except MetadataError as error:
            if not error.field.startswith("query_start_loc_cpu"):
                raise

    monkeypatch.setattr(validate_module, "validate", ignores_order)
    family_a_fails(pytester, "unordered_batch_is_rejected", "*DID NOT RAISE*", failed=1)


def test_split_stopping_at_padding_rows_fails_family_a(pytester, monkeypatch):
    real = batch.split_decodes_and_prefills

    def stops_at_padding(cam, decode_threshold=1, require_uniform=False):
        """BROKEN: a padding row (query length 0) ends the decodes (vLLM #33899)."""
        qsl = cam.query_start_loc_cpu.tolist()
        for row in range(cam.num_reqs):
            if qsl[row + 1] == qsl[row]:
                tokens = cam.num_actual_tokens
                return row, cam.num_reqs - row, qsl[row], tokens - qsl[row]
        return real(cam, decode_threshold, require_uniform)

    monkeypatch.setattr(batch, "split_decodes_and_prefills", stops_at_padding)
    family_a_fails(
        pytester,
        "test_split_decodes_and_prefills",
        "FAILED *padded_decode*",
        "FAILED *padded_mtp*",
        failed=2,
    )


def test_reorder_keeping_the_given_order_fails_family_a(pytester, monkeypatch):
    monkeypatch.setattr(
        batch, "reorder_decode_first", lambda spec, threshold=1: list(range(spec.batch_size))
    )
    family_a_fails(pytester, "reorder_puts_decodes_first", failed=1)


def test_silent_deprecated_property_fails_family_a(pytester, monkeypatch):
    def seq_lens_cpu(self) -> object:
        """BROKEN: the deprecated property without its warning."""
        return self.seq_lens.cpu() if self._seq_lens_cpu is None else self._seq_lens_cpu

    monkeypatch.setattr(CommonAttentionMetadata, "seq_lens_cpu", property(seq_lens_cpu))
    family_a_fails(pytester, "seq_lens_cpu_is_deprecated", "*DeprecationWarning*", failed=1)


def test_micro_batch_split_keeping_full_lengths_fails_family_a(pytester, monkeypatch):
    monkeypatch.setattr(transforms, "_LENGTH_FIELDS", ())  # BROKEN: no shortening
    family_a_fails(pytester, "shortens_its_lengths", failed=1)


def test_benchmark_site_with_a_wrong_slot_fails_family_a(pytester, monkeypatch):
    from benchmarks import metadata_runner

    real = metadata_runner.build_decode_metadata

    def wrong_slot(*args, **kwargs) -> CommonAttentionMetadata:
        cam = real(*args, **kwargs)
        slots = cam.slot_mapping.clone()
        slots[0] += 1
        return cam.replace(slot_mapping=slots)

    monkeypatch.setattr(metadata_runner, "build_decode_metadata", wrong_slot)
    family_a_fails(
        pytester, "construction_site_output_validates", "*slot_mapping[[]0[]]*", failed=1
    )


def test_builder_validating_without_paging_facts_fails_family_a(pytester, monkeypatch):
    real = common.validate

    def without_paging(cam, **kwargs) -> None:
        """BROKEN: the builder's call before issue 18, with no block size or count."""
        real(cam, decode_threshold=kwargs["decode_threshold"])

    monkeypatch.setattr(common, "validate", without_paging)
    family_a_fails(
        pytester,
        "rejects_malformed_record",
        "FAILED *[[]table-too-narrow[]]*",
        "FAILED *[[]write-into-another-requests-prefix[]]*",
        at_least=10,
    )


def test_builder_refusing_shared_prefix_blocks_fails_family_a(pytester, swap_rule):
    def no_sharing_at_all(checked) -> None:
        """BROKEN: a block live in two requests is refused even when both only read it."""
        table = checked.cam.block_table_tensor.cpu()
        need = (checked.seq + checked.block_size - 1) // checked.block_size
        live = [table[r, : int(need[r])] for r in range(checked.cam.num_reqs)]
        blocks = torch.cat(live) if live else torch.empty(0)
        if blocks.unique().numel() != blocks.numel():
            raise MetadataError("block_table_tensor", "no block in two requests", "a shared one")

    swap_rule("V26", no_sharing_at_all)
    family_a_fails(pytester, "accepts_valid_edge_case", "FAILED *[[]shared-read-only-prefix[]]*")
