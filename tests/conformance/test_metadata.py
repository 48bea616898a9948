"""Family A: metadata construction (`CommonAttentionMetadata`, its invariants, its sites)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from backends.base import KVCacheSpec
from conformance.errors import MetadataError
from conformance.metadata import batch, corpus, transforms
from conformance.metadata import record as metadata
from conformance.metadata.validator import validate

REPO = Path(__file__).resolve().parents[2]

# The pinned field set. Adding a field to CommonAttentionMetadata fails
# `test_cam_field_set_is_pinned` with the construction sites to review (vLLM #40844, #24322).
PINNED_CAM_FIELDS = tuple(
    """query_start_loc query_start_loc_cpu seq_lens num_reqs num_actual_tokens max_query_len
    max_seq_len block_table_tensor slot_mapping causal seq_lens_cpu_upper_bound
    dcp_local_seq_lens dcp_local_seq_lens_cpu positions is_prefilling _seq_lens_cpu""".split()
)

SPEC_NAMES = [
    "single_decode",
    "small_decode",
    "medium_decode",
    "large_decode",
    "long_context_decode",
    "mtp2_decode",
    "mtp4_decode",
    "spec_decode_mixed_len",
    "single_prefill",
    "small_prefill",
    "extend",
    "mixed_small",
    "mixed_medium",
    "padded_decode",
    "padded_mtp",
]
MULTI_TOKEN_SPECS = {"mtp2_decode", "mtp4_decode", "spec_decode_mixed_len", "padded_mtp"}
BLOCK_SIZES = [1, 16, 64]


def threshold_for(spec_name: str) -> int:
    """Decode threshold a spec-decode capable backend would use for this batch."""
    return 4 if spec_name in MULTI_TOKEN_SPECS else 1


def assert_field_error(exc: pytest.ExceptionInfo[MetadataError], field: str) -> None:
    """The error names `field` (as the field itself or an indexed element of it)."""
    __tracebackhide__ = True
    assert exc.value.field.split("[")[0].split(" ")[0] == field, (
        f"MetadataError names {exc.value.field!r}, expected {field!r}: {exc.value}"
    )


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("spec_name", SPEC_NAMES)
def test_builder_accepts_factory_output(spec_name, block_size, backend, make_builder):
    spec = batch.BATCH_SPECS[spec_name]
    threshold = threshold_for(spec_name)
    cam = batch.make_cam(spec, block_size=block_size, device=backend.device)
    validate(cam, decode_threshold=threshold, block_size=block_size)
    builder = make_builder(block_size=block_size, decode_threshold=threshold)
    meta = builder.build(cam)

    nd, npf, ndt, npt = batch.split_decodes_and_prefills(cam, threshold, threshold > 1)
    assert (meta.num_decodes, meta.num_prefills) == (nd, npf)
    assert (meta.num_decode_tokens, meta.num_prefill_tokens) == (ndt, npt)
    assert meta.head_dim == 576
    if nd:
        d = meta.decode
        assert d is not None and d.num_decodes == nd
        real = [i for i in range(nd) if spec.query_lens[i] > 0]
        pages = [-(-spec.seq_lens[i] // block_size) for i in real]
        assert d.kv_indptr.cpu().tolist() == [0, *torch.tensor(pages).cumsum(0).tolist()]
        expected_pages = torch.cat(
            [cam.block_table_tensor[i, : pages[k]].cpu() for k, i in enumerate(real)]
        )
        assert torch.equal(d.kv_indices.cpu(), expected_pages)
        if backend.plan_format is not None:  # the plan contract's backends
            assert d.plan is not None, "a batch with decode rows must carry a work plan"
    if npf:
        p = meta.prefill
        assert p is not None
        ub = cam.seq_lens_cpu_upper_bound[nd:]
        assert torch.equal(p.context_lens_cpu, ub - cam.query_lens_cpu()[nd:])


def _corpus_builder(make_builder):
    kv = KVCacheSpec(block_size=corpus.BLOCK_SIZE, num_blocks=corpus.NUM_BLOCKS)
    return make_builder(block_size=corpus.BLOCK_SIZE, kv_cache=kv)


@pytest.mark.parametrize("case", sorted(corpus.CORRUPTIONS))
def test_builder_rejects_malformed_record(case, backend, make_builder):
    # conformance.metadata.corpus: one corruption each; docs/validator.md lists the rules
    want, corrupt = corpus.CORRUPTIONS[case]
    cam = corrupt(corpus.make_record(device=backend.device))
    with pytest.raises(MetadataError) as exc:
        _corpus_builder(make_builder).build(cam)
    assert corpus.names_field(exc.value, want), f"expected {want!r} named: {exc.value}"


@pytest.mark.parametrize("case", sorted(corpus.VALID))
def test_builder_accepts_valid_edge_case(case, backend, make_builder):
    _corpus_builder(make_builder).build(
        corpus.VALID[case](corpus.make_record(device=backend.device))
    )


def _sentinel_cam() -> metadata.CommonAttentionMetadata:
    """A mixed batch with every optional field filled with distinguishable values."""
    spec = batch.BatchSpec((40, 50, 60, 70), (1, 1, 6, 8), "sentinel")
    cam = batch.make_cam(spec, block_size=16)
    return cam.replace(
        seq_lens_cpu_upper_bound=cam.seq_lens.clone(),
        dcp_local_seq_lens=(cam.seq_lens // 2).to(torch.int32),
        dcp_local_seq_lens_cpu=(cam.seq_lens // 2).to(torch.int32),
        is_prefilling=torch.tensor([False, False, True, True]),
        _seq_lens_cpu=cam.seq_lens.clone(),
        positions=cam.positions.clone(),
        causal=True,
    )


TRANSFORMS: dict[str, Callable[[metadata.CommonAttentionMetadata], tuple]] = {
    # name -> (result, request slice, token slice) of the sentinel batch
    "replace": lambda c: (c.replace(), slice(0, 4), slice(0, 16)),
    "unpad": lambda c: (
        c.unpadded(num_actual_tokens=8, num_actual_reqs=3),
        slice(0, 3),
        slice(0, 8),
    ),
    "decode_view": lambda c: (transforms.decode_view(c, 2), slice(0, 2), slice(0, 2)),
    "prefill_view": lambda c: (transforms.prefill_view(c, 2), slice(2, 4), slice(2, 16)),
    "slice_ubatch": lambda c: (transforms.slice_ubatch(c, 2, 8), slice(2, 3), slice(2, 8)),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_every_optional_field_survives(name):
    cam = _sentinel_cam()
    out, reqs, toks = TRANSFORMS[name](cam)
    dropped = transforms.DROPPED_ON_PURPOSE.get(name, {})
    for field in metadata.optional_field_names():
        value = getattr(out, field)
        if field in dropped:
            continue
        assert value is not None, f"{name} dropped {field!r} (not on its DROPPED_ON_PURPOSE list)"
        original = getattr(cam, field)
        if field in transforms.PER_TOKEN_FIELDS:
            assert torch.equal(value, original[toks]), f"{name} mangled {field!r}"
        elif field in transforms.PER_REQUEST_FIELDS:
            # every transform here cuts at request boundaries, so no length is shortened
            assert torch.equal(value, original[reqs]), f"{name} mangled {field!r}"
        elif field == "causal":
            assert value == original
    validate(out, decode_threshold=1, block_size=16)


def test_micro_batch_split_inside_a_request_shortens_its_lengths():
    cam = _sentinel_cam().replace(dcp_local_seq_lens=None, dcp_local_seq_lens_cpu=None)
    first = transforms.slice_ubatch(cam, 0, 5)  # request 2 split after 3 of its 6 tokens
    second = transforms.slice_ubatch(cam, 5, 16)
    assert first.seq_lens.tolist() == [40, 50, 57]
    assert first.seq_lens_cpu_upper_bound.tolist() == [40, 50, 57]
    assert second.seq_lens.tolist() == [60, 70]
    assert second.query_lens_cpu().tolist() == [3, 8]
    for part in (first, second):
        validate(part, decode_threshold=1, block_size=16)


def test_micro_batch_split_inside_a_request_is_refused_under_dcp():
    with pytest.raises(ValueError, match="DCP"):
        transforms.slice_ubatch(_sentinel_cam(), 0, 5)


@pytest.mark.parametrize("field", list(metadata.BUILDER_REQUIRED_FIELDS))
def test_missing_field_names_itself(field, backend, make_builder):
    cam = batch.make_cam(batch.BATCH_SPECS["mixed_small"], block_size=16, device=backend.device)
    builder = make_builder(block_size=16)
    with pytest.raises(MetadataError) as exc:
        builder.build(cam.replace(**{field: None}))
    assert_field_error(exc, field)


@pytest.mark.parametrize("field", list(metadata.REQUIRED_FIELDS))
def test_constructor_without_required_field_names_it(field):
    cam = batch.make_cam(batch.BATCH_SPECS["small_decode"], block_size=16)
    kwargs = {f.name: getattr(cam, f.name) for f in dataclasses.fields(cam)}
    del kwargs[field]
    with pytest.raises(TypeError, match=field):
        metadata.CommonAttentionMetadata(**kwargs)  # conformance-audit: ignore[CAM003]


def test_builder_rejects_upper_bound_below_seq_lens(backend, make_builder):
    cam = batch.make_cam(batch.BATCH_SPECS["mixed_small"], block_size=16, device=backend.device)
    low = cam.seq_lens_cpu_upper_bound.clone()
    low[3] -= 1
    with pytest.raises(MetadataError) as exc:
        make_builder(block_size=16).build(cam.replace(seq_lens_cpu_upper_bound=low))
    assert_field_error(exc, "seq_lens_cpu_upper_bound")


def test_optimistic_upper_bound_on_decode_rows_is_accepted(backend, make_builder):
    cam = batch.make_cam(batch.BATCH_SPECS["mixed_small"], block_size=16, device=backend.device)
    optimistic = cam.seq_lens_cpu_upper_bound.clone()
    optimistic[:2] += 3  # async spec decode assumes every draft accepted
    meta = make_builder(block_size=16).build(cam.replace(seq_lens_cpu_upper_bound=optimistic))
    assert torch.equal(
        meta.prefill.context_lens_cpu, cam.seq_lens[2:].cpu() - cam.query_lens_cpu()[2:]
    )


def test_prefill_context_comes_from_the_upper_bound(backend, make_builder):
    cam = batch.make_cam(batch.BATCH_SPECS["extend"], block_size=16, device=backend.device)
    meta = make_builder(block_size=16).build(cam)
    assert meta.prefill.context_lens_cpu.tolist() == [80, 150]
    chunks = meta.prefill.chunked_context
    assert chunks is not None
    assert chunks.seq_lens.sum(0).tolist() == [80, 150]


@pytest.mark.parametrize(
    ("spec_name", "threshold", "uniform", "expected"),
    [
        ("padded_decode", 1, False, (4, 0, 2, 0)),
        ("padded_mtp", 2, True, (3, 0, 4, 0)),
        ("mtp4_decode", 4, True, (4, 0, 16, 0)),
        ("spec_decode_mixed_len", 4, True, (1, 2, 3, 6)),
        ("spec_decode_mixed_len", 4, False, (3, 0, 9, 0)),
        ("mixed_medium", 1, False, (3, 2, 3, 71)),
        ("single_prefill", 1, False, (0, 1, 0, 64)),
    ],
)
def test_split_decodes_and_prefills(spec_name, threshold, uniform, expected):
    cam = batch.make_cam(batch.BATCH_SPECS[spec_name], block_size=16)
    assert batch.split_decodes_and_prefills(cam, threshold, uniform) == expected


def test_reorder_puts_decodes_first_then_extends_then_prefills():
    spec = batch.BatchSpec((64, 10, 100, 7, 0), (64, 1, 20, 1, 0), "unordered")
    assert batch.reorder_decode_first(spec) == [1, 3, 2, 0, 4]
    cam = batch.make_cam(batch.reordered(spec), block_size=16)
    validate(cam, block_size=16)


def test_unordered_batch_is_rejected():
    spec = batch.BatchSpec((64, 10), (64, 1), "prefill-first")
    cam = batch.make_cam(spec, block_size=16)
    with pytest.raises(MetadataError) as exc:
        validate(cam)
    assert_field_error(exc, "query_start_loc_cpu")


def test_seq_lens_cpu_is_deprecated():
    cam = batch.make_cam(batch.BATCH_SPECS["small_decode"], block_size=16)
    with pytest.warns(DeprecationWarning, match="seq_lens_cpu"):
        values = cam.seq_lens_cpu
    assert torch.equal(values, cam.seq_lens.cpu())


def _construction_sites() -> list:
    from conformance.audit.api import find_construction_sites

    return find_construction_sites(REPO)


def _site_key(site) -> str:
    return f"{Path(site.path).resolve().relative_to(REPO).as_posix()}::{site.qualname}"


def _exercise_make_cam(device: torch.device) -> metadata.CommonAttentionMetadata:
    return batch.make_cam(batch.BATCH_SPECS["mixed_medium"], block_size=16, device=device)


def _exercise_benchmark_runner(device: torch.device) -> metadata.CommonAttentionMetadata:
    from benchmarks.metadata_runner import build_decode_metadata

    return build_decode_metadata([33, 700, 4096], query_len=2, block_size=16, device=device)


# Every construction site in this repository, with the call that exercises it on a device.
EXERCISED_SITES: dict[str, Callable[[torch.device], metadata.CommonAttentionMetadata]] = {
    "conformance/metadata/batch.py::make_cam": _exercise_make_cam,
    "benchmarks/metadata_runner.py::build_decode_metadata": _exercise_benchmark_runner,
}


def test_cam_field_set_is_pinned():
    fields = metadata.cam_field_names()
    if fields != PINNED_CAM_FIELDS:
        added = sorted(set(fields) - set(PINNED_CAM_FIELDS))
        removed = sorted(set(PINNED_CAM_FIELDS) - set(fields))
        sites = "\n  ".join(
            f"{site.path}:{site.line} ({site.qualname})" for site in _construction_sites()
        )
        pytest.fail(
            f"CommonAttentionMetadata fields changed (added {added}, removed {removed}).\n"
            f"Review every construction site, conformance/metadata/transforms.py and the "
            f"builders,\n"
            f"then update PINNED_CAM_FIELDS. Sites:\n  {sites}"
        )


def test_every_construction_site_is_exercised():
    # Sites that break the contract on purpose carry an audit suppression comment.
    found = {_site_key(site) for site in _construction_sites() if not site.ignored}
    assert found == set(EXERCISED_SITES), (
        f"construction sites without an exercising call: {sorted(found - set(EXERCISED_SITES))}; "
        f"listed but gone: {sorted(set(EXERCISED_SITES) - found)}"
    )


@pytest.mark.parametrize("site", sorted(EXERCISED_SITES))
def test_construction_site_output_validates(site, backend, make_builder):
    cam = EXERCISED_SITES[site](backend.device)
    threshold = cam.max_query_len if cam.max_query_len <= 4 else 1
    validate(cam, decode_threshold=threshold, block_size=16)
    make_builder(block_size=16, decode_threshold=threshold).build(cam)


@pytest.mark.parametrize("site", sorted(EXERCISED_SITES))
def test_construction_site_output_builds_as_prefill(site, backend, make_builder):
    # A decode-only build never reads seq_lens_cpu_upper_bound; at threshold 1 every
    # multi-token row is a prefill row, whose context the builder takes from it.
    cam = EXERCISED_SITES[site](backend.device)
    meta = make_builder(block_size=16, decode_threshold=1).build(cam)
    prefill = meta.prefill
    assert prefill is not None, f"{site}: the batch has no prefill rows at decode_threshold 1"
    upper = cam.seq_lens_cpu_upper_bound
    assert upper is not None, f"{site}: seq_lens_cpu_upper_bound is None"
    rows = slice(meta.num_decodes, cam.num_reqs)
    expected = upper[rows].to(torch.int32) - cam.query_lens_cpu()[rows]
    assert torch.equal(prefill.context_lens_cpu.cpu(), expected), (
        f"{site}: prefill context {prefill.context_lens_cpu.tolist()}, expected "
        f"seq_lens_cpu_upper_bound - query lens = {expected.tolist()}"
    )


def test_construction_audit_is_clean_on_this_repository():
    from conformance.audit.api import audit_construction

    findings = audit_construction(REPO)
    assert not findings, "\n".join(f.to_text() for f in findings)
