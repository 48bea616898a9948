"""Self-tests of the golden store, the case table and generation (tolerances: test_tolerance)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from conformance.goldens import (
    CASES,
    GoldenCase,
    GoldenError,
    GoldenStore,
    case_table,
    get_case,
    load_golden,
)
from conformance.goldens import build as gen_build
from conformance.goldens import generate as gen
from conformance.goldens.__main__ import main
from conformance.goldens.cases import REAL_CU_COUNTS
from conformance.goldens.record import golden_from_stored
from conformance.goldens.store import StoredGolden, deserialize, serialize
from conformance.numerics.fp8 import fp8_dtype_for_arch

pytestmark = pytest.mark.selftest

FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
TINY_ID = "tiny-gfx942-h16-bf16q-fp8kv-q1-p1-cu80"
FN = torch.float8_e4m3fn
SIZE_LIMIT = 30_000_000  # bytes: the tree carried to a GPU machine must stay small


@pytest.fixture
def golden_copy(tmp_path: Path) -> Path:
    """A writable copy of the committed golden directory."""
    copy = tmp_path / "goldens"
    shutil.copytree(GoldenStore().root, copy)
    return copy


def fp8_with_nan(dtype: torch.dtype) -> torch.Tensor:
    values = torch.tensor([0.0, -0.5, 1.75, 200.0, -3e-3, float("nan")])
    return values.to(dtype)


# --------------------------------------------------------------------------------------
# Serialisation


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_round_trips_bit_exactly_as_raw_bytes(dtype: torch.dtype) -> None:
    x = fp8_with_nan(dtype)
    data = serialize({"x": x, "i": torch.arange(3, dtype=torch.int32)}, {"k": 1})
    tensors, meta = deserialize(data, path="mem")
    assert tensors["x"].dtype == dtype
    assert torch.equal(tensors["x"].view(torch.uint8), x.view(torch.uint8))
    assert meta == {"k": 1}
    header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
    assert header["x"]["dtype"] == "U8"  # stored as bytes, readable by any safetensors


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_native_safetensors_fp8_round_trip(dtype: torch.dtype) -> None:
    """Informational: this safetensors stores both flavours natively (the store does not
    rely on it: older readers lack e4m3fnuz)."""
    x = fp8_with_nan(dtype)
    try:
        back = st_load(st_save({"x": x}))["x"]
    except Exception as exc:  # an older safetensors: the raw-bytes path is what we use
        pytest.skip(f"safetensors cannot store {dtype} natively: {exc}")
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), x.view(torch.uint8))


def test_serialize_is_deterministic() -> None:
    tensors = {f"t{i}": torch.full((3,), float(i)) for i in range(6)}
    meta = {f"k{i}": i for i in range(8)}
    assert serialize(tensors, meta) == serialize(dict(reversed(tensors.items())), meta)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x80\x02}q\x00.", "not a safetensors file"),  # a pickle
        (st_save({"x": torch.zeros(2)}), "metadata: expected a JSON 'golden' entry"),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ", "unreadable safetensors"),
    ],
    ids=["pickle", "no-metadata", "bad-header"],
)
def test_deserialize_rejects_foreign_data_naming_the_path(data: bytes, match: str) -> None:
    with pytest.raises(GoldenError, match=match) as exc:
        deserialize(data, path="/some/golden.safetensors")
    assert str(exc.value).startswith("/some/golden.safetensors: ")


# --------------------------------------------------------------------------------------
# The store


def test_load_verifies_sha256_and_names_the_path(golden_copy: Path) -> None:
    store = GoldenStore(golden_copy)
    path = store.path_of(TINY_ID)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(GoldenError, match="does not match the manifest") as exc:
        store.load(TINY_ID)
    assert exc.value.path == path
    assert [p.path for p in store.verify()] == [path]


def test_missing_and_stray_files_are_reported(golden_copy: Path) -> None:
    store = GoldenStore(golden_copy)
    store.path_of(TINY_ID).rename(golden_copy / "stray.safetensors")
    problems = {p.path.name: p.detail for p in store.verify()}
    assert "missing golden file" in problems[f"{TINY_ID}.safetensors"]
    assert "not listed in the manifest" in problems["stray.safetensors"]
    with pytest.raises(GoldenError, match="missing golden file"):
        store.load(TINY_ID)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{", "not valid JSON"),
        ('{"format": 99, "cases": {}}', "format: expected 1"),
        ('{"format": 1, "cases": {"x": {"file": "a"}}}', r"cases\['x'\]: malformed"),
        (
            '{"format": 1, "cases": {"x": {"file": "../a", "sha256": "", "size": 0, "case": {}}}}',
            "not a plain file name",
        ),
    ],
    ids=["json", "format", "entry", "path"],
)
def test_malformed_manifest_names_the_manifest(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(GoldenError, match=match) as exc:
        GoldenStore(tmp_path).read_manifest()
    assert exc.value.path == tmp_path / "manifest.json"


def test_missing_manifest_says_how_to_generate(tmp_path: Path) -> None:
    with pytest.raises(GoldenError, match="nox -s goldens"):
        GoldenStore(tmp_path).read_manifest()


def test_content_that_disagrees_with_its_case_is_rejected() -> None:
    stored = GoldenStore().load(TINY_ID)
    bad_q = {**stored.tensors, "q": stored.tensors["q"].float()}
    with pytest.raises(GoldenError, match=r"tensor 'q': expected torch\.bfloat16"):
        golden_from_stored(replace(stored, tensors=bad_q))
    other = get_case("tiny-gfx950-h32-fp8-q2-p16-cu256").to_json()
    with pytest.raises(GoldenError, match="differs from the manifest entry"):
        golden_from_stored(replace(stored, meta={**stored.meta, "case": other}))
    missing = {k: v for k, v in stored.tensors.items() if k != "lse"}
    with pytest.raises(GoldenError, match=r"missing tensors \['lse'\]"):
        golden_from_stored(StoredGolden(TINY_ID, stored.path, missing, stored.meta, stored.entry))


# --------------------------------------------------------------------------------------
# The committed set and the case table


def test_manifest_matches_the_case_table() -> None:
    manifest = GoldenStore().read_manifest()
    table = case_table()
    assert list(manifest.entries) == list(table), (
        "the golden set is stale: regenerate with `nox -s goldens`"
    )
    for case_id, entry in manifest.entries.items():
        assert entry.case == table[case_id].to_json(), f"{case_id}: parameters changed"
        assert set(table[case_id].expect) <= set(entry.provenance["features"]), case_id


def test_golden_set_stays_small() -> None:
    root = GoldenStore().root
    total = sum(p.stat().st_size for p in root.iterdir() if p.is_file())
    limit = f"limit {SIZE_LIMIT / 1e6:.0f} MB"
    assert total < SIZE_LIMIT, f"{root} holds {total / 1e6:.1f} MB ({limit})"


def test_case_table_covers_the_issue() -> None:
    cases = list(CASES)
    assert {c.arch for c in cases} == {"gfx942", "gfx950", "triton"}
    assert {c.heads for c in cases} == {16, 32, 48, 64, 128}
    assert {c.q_len for c in cases} == {1, 2, 3, 4}
    assert {1, 16, 64} <= {c.page_size for c in cases}
    assert any(not c.causal and c.q_len > 1 for c in cases)  # a non-causal batch
    assert any(c.pad_rows and c.tiny for c in cases)  # padded q_len-0 rows
    assert any(1 in c.seq_lens for c in cases)  # kv length 1
    assert any(not c.via_builder for c in cases)  # kv shorter than q
    # FlashInfer's fp8 semantics: bf16 q over an e4m3fn cache, every page size
    fi = {c.page_size for c in cases if c.q_dtype == "bf16" and c.kv_torch_dtype == FN}
    assert {1, 16, 64} <= fi
    assert {c.num_cus for c in cases} == set(REAL_CU_COUNTS)
    assert {(c.q_dtype, c.kv_dtype) for c in cases} == {
        ("bf16", "bf16"),
        ("bf16", "fp8"),
        ("fp8", "fp8"),
    }
    assert {-1, 1, 16, 32} <= {c.max_split_per_batch for c in cases}
    assert max(c.batch for c in cases) == 64
    assert sum(c.tiny for c in cases) >= 3
    assert any(c.arch == "gfx950" and c.heads == 32 and c.kv_dtype == "fp8" for c in cases)
    for arch in ("gfx942", "gfx950", "triton"):
        want = torch.float8_e4m3fnuz if arch == "gfx942" else torch.float8_e4m3fn
        assert fp8_dtype_for_arch(arch) == want


def test_case_problems_catch_invalid_records() -> None:
    case = get_case(TINY_ID)
    assert not case.problems()
    bad = {
        "fp8 q over a bf16 cache": replace(case, q_dtype="fp8", kv_dtype="bf16"),
        "unit fp8 scale": replace(case, kv_scale=1.0),
        "scale on bf16": replace(case, q_scale=0.5),
        "kv below q": replace(case, seq_lens=(1, 5), q_len=2),
        "unreal CU count": replace(case, num_cus=100),
        "same alt CUs": replace(case, alt_num_cus=case.num_cus),
        "too big for tiny": replace(case, heads=128),
        "id unfit for a file name": replace(case, id="a/b"),
    }
    for what, record in bad.items():
        assert record.problems(), what
    with pytest.raises(KeyError, match="unknown golden case 'nope'"):
        get_case("nope")


def test_case_json_round_trip() -> None:
    for case in CASES:
        assert GoldenCase.from_json(case.to_json()) == case
    with pytest.raises(ValueError, match=r"unknown keys \['extra'\]"):
        GoldenCase.from_json({**CASES[0].to_json(), "extra": 1})


def test_loaded_golden_feeds_a_poisoned_cache_and_its_plan() -> None:
    golden = load_golden(GoldenStore(), "gfx942-h16-fp8-q4-p16-cu80-masked-split")
    cache = golden.kv_cache()
    assert cache.dtype == torch.float8_e4m3fnuz and cache.shape[1:] == (16, 576)
    nan_slots = int(torch.isnan(cache.float()).any(-1).sum())
    assert nan_slots == golden.poisoned_slots == cache.shape[0] * 16 - sum(golden.case.seq_lens)
    decode = golden.decode_metadata()
    assert decode.plan is not None and decode.plan.num_works == golden.meta["plan"]["num_works"]
    assert decode.planner_call["causal"] is True
    cam = golden.cam()
    assert torch.equal(cam.block_table_tensor, golden["block_table"])
    with pytest.raises(GoldenError, match="no CommonAttentionMetadata expresses it"):
        load_golden(GoldenStore(), "gfx942-h16-bf16q-fp8kv-q4-p2-cu80-kv-lt-q").cam()


# --------------------------------------------------------------------------------------
# Generation


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype in FP8 else t


def test_generation_reproduces_a_committed_golden() -> None:
    fresh = gen.build_golden(get_case(TINY_ID))
    stored = GoldenStore().load(TINY_ID)
    assert set(fresh.tensors) == set(stored.tensors)
    for name, tensor in fresh.tensors.items():
        if name in ("out", "lse"):  # fp32 results: equal up to the machine's rounding
            assert torch.allclose(tensor, stored.tensors[name], rtol=1e-6, atol=1e-6), name
        else:  # inputs and plan: bit for bit
            assert torch.equal(_bits(tensor), _bits(stored.tensors[name])), name
    assert fresh.meta == stored.meta


def test_generation_refuses_a_result_that_disagrees_with_the_reference(monkeypatch) -> None:
    real = gen_build.execute_plan

    def off_by_a_bit(*args, **kwargs):
        result = real(*args, **kwargs)
        result.out[0, 0, 0] += 1e-3  # far above fp32 rounding, far below a bf16 test bound
        return result

    monkeypatch.setattr(gen_build, "execute_plan", off_by_a_bit)
    with pytest.raises(gen.GenerationError, match=f"golden {TINY_ID}: output disagrees"):
        gen.build_golden(get_case(TINY_ID))


def test_generation_refuses_a_case_that_lost_its_feature() -> None:
    case = replace(get_case(TINY_ID), expect=("split", "fold"))
    with pytest.raises(gen.GenerationError, match=r"lacks the expected features \['fold'\]"):
        gen.build_golden(case)


def test_cli_check_passes_then_reports_a_changed_golden(golden_copy: Path, capsys) -> None:
    assert main(["generate", "--check", "--only", TINY_ID, "--dir", str(golden_copy)]) == 0
    # Tamper consistently (manifest sha updated): only a regeneration can tell.
    store = GoldenStore(golden_copy)
    stored = store.load(TINY_ID)
    tensors = {**stored.tensors, "out": stored.tensors["out"] * 1.5}
    entry = store.write(
        TINY_ID, tensors, stored.meta, case=stored.entry.case, provenance=stored.entry.provenance
    )
    manifest = store.read_manifest()
    manifest.entries[TINY_ID] = entry
    store.write_manifest(manifest)
    assert not store.verify()
    capsys.readouterr()
    assert main(["generate", "--check", "--only", TINY_ID, "--dir", str(golden_copy)]) == 1
    out = capsys.readouterr().out
    assert f"changed  {TINY_ID}" in out and "out: max |diff|" in out
    # Regenerating restores the committed bytes and says what changed.
    assert main(["generate", "--only", TINY_ID, "--dir", str(golden_copy)]) == 0
    assert f"changed  {TINY_ID}" in capsys.readouterr().out
    original = GoldenStore().load(TINY_ID)
    assert (
        gen.describe_changes(
            (original.tensors, original.meta), (store.load(TINY_ID).tensors, original.meta)
        )
        == []
    )


def test_check_prints_a_summary_and_generate_one_line_per_case(golden_copy: Path) -> None:
    second = "tiny-gfx950-h32-fp8-q2-p16-cu256"
    lines: list[str] = []
    assert gen.generate(golden_copy, only=[TINY_ID, second], check=True, echo=lines.append) == 0
    assert not [line for line in lines if line.startswith("  generating")], lines
    assert lines[-2:] == ["  unchanged: 2 case(s)", "goldens: ok"]
    lines.clear()
    assert gen.generate(golden_copy, only=[TINY_ID, second], echo=lines.append) == 0
    assert [line for line in lines if line.startswith("  generating")] == [
        f"  generating {TINY_ID}",
        f"  generating {second}",
    ]


def test_a_refused_golden_leaves_the_store_untouched(golden_copy: Path, monkeypatch) -> None:
    real = gen.build_golden
    second = "tiny-gfx950-h32-fp8-q2-p16-cu256"

    def refuses_the_second(case: GoldenCase) -> gen.GoldenData:
        if case.id == second:
            raise gen.GenerationError(f"golden {case.id}: refused on purpose")
        data = real(case)
        data.tensors["out"] = data.tensors["out"] + 1.0  # would change the first file
        return data

    monkeypatch.setattr(gen, "build_golden", refuses_the_second)
    before = {p.name: p.read_bytes() for p in golden_copy.iterdir()}
    assert main(["generate", "--only", TINY_ID, second, "--dir", str(golden_copy)]) == 1
    assert {p.name: p.read_bytes() for p in golden_copy.iterdir()} == before


def test_describe_changes_names_buffers_and_metadata_fields() -> None:
    old_t = {"a": torch.zeros(3), "plan.x": torch.tensor([1, 2, 3], dtype=torch.int32)}
    new_t = {"a": torch.zeros(4), "plan.x": torch.tensor([1, 5, 3], dtype=torch.int32)}
    old_m = {"case": {"num_cus": 80, "seed": 1}, "v": 1}
    new_m = {"case": {"num_cus": 304, "seed": 1}, "v": 1}
    lines = gen.describe_changes((old_t, old_m), (new_t, new_m))
    assert lines == [
        "a: torch.float32 (3,) -> torch.float32 (4,)",
        "plan.x: 1 of 3 entries differ (max |diff| 3)",
        "metadata changed: case.num_cus",
    ]
    assert gen.describe_changes((old_t, old_m), (old_t, old_m)) == []


def test_cli_rejects_unknown_case_ids(capsys) -> None:
    assert main(["generate", "--check", "--only", "no-such-case"]) == 1
    assert "unknown case id(s) ['no-such-case']" in capsys.readouterr().out
