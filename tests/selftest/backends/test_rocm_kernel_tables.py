"""AITER's MLA kernel tables: the vendored copies, the model of AITER's kernel choice, the
backend asking only for kernels AITER ships, and the suite's derivations from the table.

The expectations of the kernel choice are read off AITER's source by hand (ROCm/aiter
e4048607a5: ``hsa/<arch>/mla/mla_asm.csv``, ``aiter/mla.py``, ``csrc/py_itfs_cu/asm_mla.cu``),
not computed with the model under test.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from mla_selftest_rocm_wiring import SM_SCALE, build, decode_inputs  # rocm_wiring.py

from backends.rocm import decode as rocm_decode
from backends.rocm.backend import RocmAiterBackend
from backends.rocm.kernel_table import MANIFEST, TABLES, vendored_table
from conformance.aiter_kernels import KernelTable, choose, parse_table
from conformance.applicability import (
    LSE_NOT_APPLICABLE,
    PAIR_SHAPE,
    Declaration,
    lse_not_comparable,
    not_applicable,
)
from conformance.metadata.batch import BatchSpec
from conformance.numerics import masking
from conformance.signoff.classify import lse_not_applicable_issues
from conformance.signoff.model import CaseResult, Outcome

pytestmark = pytest.mark.usefixtures("standin_never_into_reports")
AiterAbort = sys.modules["mla_selftest_fake_aiter"].AiterAbort
REPO = Path(__file__).resolve().parents[3]
NUMERICS = "tests/conformance/test_numerics.py::test_decode_matches_golden"
MASKING = (
    "tests/conformance/test_masking.py::test_no_token_outside_the_causal_window_reaches_the_output"
)


def _choice(arch: str, q: str, kv: str, heads: int, q_len: int, causal: bool = True):
    return choose(
        vendored_table(arch), q_dtype=q, kv_dtype=kv, heads=heads, q_len=q_len, causal=causal
    )


# -- the vendored tables and the model of AITER's choice ------------------------------------


def test_the_vendored_tables_are_the_manifest_s() -> None:
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    assert len(manifest["aiter_commit"]) == 40
    for relative, digest in manifest["tables"].items():
        assert hashlib.sha256((TABLES / relative).read_bytes()).hexdigest() == digest, relative


def test_gfx942_ships_one_persistent_lse_kernel_fp8_64_heads_q1() -> None:
    rows = [r for r in vendored_table("gfx942").rows if r.persistent and r.lse]
    assert [(r.q_type, r.kv_type, r.gqa, r.q_seq_len) for r in rows] == [("fp8", "fp8", 64, 1)]
    assert _choice("gfx942", "e4m3fnuz", "e4m3fnuz", 64, 1).lse_kernel is not None
    plain = _choice("gfx942", "e4m3fnuz", "e4m3fnuz", 16, 1)  # qh16_qseqlen1_gqaratio16_ps
    assert plain.kernel is not None and plain.lse_kernel is None
    assert "mla_a8w8_qh16_qseqlen1_gqaratio16_ps" in plain.kernel.name
    folded = _choice("gfx942", "bf16", "bf16", 32, 2)  # folded into 2 x 16, padded to q_len 4
    assert folded.key.startswith("q_type:bf16 kv_type:bf16 gqa:16 ps:1 qseqlen:4")
    assert folded.lse_reason and "no LSE variant" in folded.lse_reason


def test_gfx950_has_no_non_causal_kernel_for_bf16_q_over_an_fp8_cache() -> None:
    assert not any(
        r.q_type == "bf16" and r.kv_type == "fp8" and (r.lse or not r.causal)
        for r in vendored_table("gfx950").rows
    )
    choice = _choice("gfx950", "bf16", "e4m3fn", 16, 4, causal=False)
    assert choice.kernel is None and "causal:0" in choice.reason
    one_token = _choice("gfx950", "bf16", "e4m3fn", 16, 1, causal=False)
    assert one_token.kernel is not None, "one query token: the masked kernel serves both"
    # fp8 32 heads at q_len 2 is remapped to the 16-head q_len-4 kernel, which has an LSE
    remapped = _choice("gfx950", "e4m3fn", "e4m3fn", 32, 2)
    assert remapped.key.startswith("q_type:fp8 kv_type:fp8 gqa:16 ps:1 qseqlen:4")
    assert remapped.lse_kernel is not None


def test_shapes_aiter_aborts_or_asserts_on_have_no_kernel() -> None:
    over = _choice("gfx942", "e4m3fnuz", "e4m3fnuz", 16, 5)  # asm_mla.cu: qo_len <= 4 on gfx942
    assert over.kernel is None and "abort" in over.reason and "qo_len <= 4" in over.reason
    assert _choice("gfx950", "e4m3fn", "e4m3fn", 16, 5).kernel is not None
    heads24 = _choice("gfx942", "bf16", "bf16", 24, 1)  # aiter/mla.py: neither native nor folded
    assert heads24.kernel is None and "nhead=24" in heads24.reason
    flavour = _choice("gfx942", "e4m3fn", "e4m3fn", 16, 1)
    assert flavour.kernel is None and "not aiter.dtypes.fp8 on gfx942" in flavour.reason


def test_a_malformed_table_is_named_by_line_and_column() -> None:
    header = "qType,kvType,Gqa,ps,qSeqLen,prefill,causal,lse,knl_name,co_name\n"
    with pytest.raises(ValueError, match=r"t\.csv: line 3: Gqa='x' is no integer"):
        parse_table(header + "bf16,bf16,16,1,4,0,1,0,a,a.co\nbf16,bf16,x,1,4,0,1,0,b,b.co\n",
                    arch="gfx942", source="t.csv")  # fmt: skip
    with pytest.raises(ValueError, match=r"t\.csv: line 2: expected 10 fields"):
        parse_table(header + "bf16,bf16,16,1,4,0,1,0,a,a.cofp8,fp8\n", arch="x", source="t.csv")
    with pytest.raises(ValueError, match=r"t\.csv: line 1: no column lse"):
        parse_table(
            "qType,kvType,Gqa,ps,qSeqLen,prefill,causal,knl_name\n", arch="x", source="t.csv"
        )


def test_the_masking_shape_is_the_suite_s_pair_shape() -> None:
    assert PAIR_SHAPE == (masking.HEADS, masking.QUERY_LEN, True)


# -- the declaration and the suite's derivations ---------------------------------------------


def _declaration(arch: str) -> Declaration:
    return Declaration(
        "rocm", "aiter-v1", ("bf16", "e4m3fnuz", "e4m3fn"), ("bf16", "e4m3fnuz", "e4m3fn"),
        "tensor-core", kernels=vendored_table(arch),
    )  # fmt: skip


def test_the_declared_table_survives_the_sidecar() -> None:
    declared = _declaration("gfx950")
    back = Declaration.from_json("rocm", json.loads(json.dumps(declared.to_json())))
    assert back is not None and back.kernels == declared.kernels
    assert "kernels=aiter e4048607a5" in declared.words()
    broken = {**declared.to_json(), "kernels": {"arch": "gfx950", "rows": [[1]]}}
    assert Declaration.from_json("rocm", broken) is None
    assert KernelTable.from_json({"arch": 1}) is None


def test_the_suite_derives_no_kernel_and_lse_not_comparable_from_the_table() -> None:
    gfx942, gfx950 = _declaration("gfx942"), _declaration("gfx950")
    fp8_b64 = f"{NUMERICS}[gfx942-h16-fp8-q1-p1-cu304-b64]"
    assert not_applicable(gfx942, fp8_b64) is None
    assert "no LSE variant" in lse_not_comparable(gfx942, fp8_b64)
    assert "e4m3fnuz is not aiter.dtypes.fp8 on gfx950" in not_applicable(gfx950, fp8_b64)
    assert lse_not_comparable(gfx950, fp8_b64) is None, "not applicable at all: no LSE reason"
    noncausal = f"{NUMERICS}[tiny-gfx950-h16-bf16q-fp8kv-q4-p16-cu256-noncausal]"
    assert "has no kernel for q_type:bf16 kv_type:fp8" in not_applicable(gfx950, noncausal)
    assert lse_not_comparable(gfx950, f"{MASKING}[q-bf16-kv-bf16]") is None
    assert lse_not_comparable(gfx942, f"{MASKING}[q-bf16-kv-bf16]") is not None
    without_table = Declaration("rocm", "aiter-v1", ("bf16",), ("bf16",), "tensor-core")
    assert lse_not_comparable(without_table, fp8_b64) is None
    assert without_table == Declaration("rocm", "aiter-v1", ("bf16",), ("bf16",), "tensor-core")


def _case(node_id: str, **properties: str) -> CaseResult:
    return CaseResult(node_id, "numerics", Outcome.PASSED, "", "", properties, 0.0, "rocm.xml")


def test_the_sign_off_re_derives_every_lse_not_comparable_claim() -> None:
    gfx942 = _declaration("gfx942")
    node = f"{NUMERICS}[gfx942-h16-fp8-q1-p1-cu304-b64]"
    derived = lse_not_comparable(gfx942, node)
    assert (
        lse_not_applicable_issues([_case(node, **{LSE_NOT_APPLICABLE: derived})], "rocm", gfx942)
        == []
    )
    claims = [  # a claim with another reason, and one where the table has an LSE variant
        _case(node, **{LSE_NOT_APPLICABLE: derived.replace("qh16", "qh99")}),
        _case(f"{NUMERICS}[gfx950-h48-fp8-q1-p64-cu256]", **{LSE_NOT_APPLICABLE: "mine"}),
    ]
    issues = lse_not_applicable_issues(claims, "rocm", _declaration("gfx950"))
    assert [i.code for i in issues] == ["SIGN009"] and "2 tests of rocm" in issues[0]
    issues = lse_not_applicable_issues(claims[:1], "rocm", gfx942)
    assert "the suite derives 'LSE not comparable" in issues[0]


# -- the backend: only kernels AITER ships -----------------------------------------------------


def _fp8_batch(backend, heads: int):
    spec = BatchSpec((90, 20), (1, 1))
    meta = build(backend, spec, num_heads=heads, dtype="fp8")
    q, cache = decode_inputs(meta, spec, num_heads=heads, block_size=1)
    fp8 = backend.runtime().api.fp8
    return meta, q.to(fp8), cache.to(fp8)


def test_the_backend_reads_the_installed_aiter_s_table(rocm) -> None:
    backend, _ = rocm("gfx950", 4)
    table = backend.kernel_table()
    assert table is not None and table.arch == "gfx950"
    assert table.source.startswith("aiter 0.0.0+selftest-standin hsa/gfx950/mla/mla_asm.csv")
    assert Declaration.of(backend).kernels == table


def test_without_a_readable_table_the_backend_is_unavailable(rocm, monkeypatch, tmp_path) -> None:
    _, standin = rocm("gfx942", 4)
    monkeypatch.setattr(standin.modules["aiter.jit.core"], "AITER_ASM_DIR", str(tmp_path))
    availability = RocmAiterBackend().availability()
    assert not availability.available
    assert "cannot read AITER's MLA kernel table" in availability.reason
    assert "gfx942/mla/mla_asm.csv" in availability.reason


def test_negative_control_lse_asked_where_none_exists_is_refused_before_the_call(rocm) -> None:
    backend, standin = rocm("gfx942", 4)
    meta, q, cache = _fp8_batch(backend, 16)  # gfx942 fp8 16 heads: no LSE variant
    with pytest.raises(rocm_decode.AiterWouldAbort, match="return_lse=True, but no LSE variant"):
        rocm_decode.aiter_decode(
            backend.runtime(), q, cache, meta.decode, sm_scale=SM_SCALE, q_scale=1.0,
            kv_scale=1.0, return_lse=True,
        )  # fmt: skip
    assert standin.calls_to("mla_decode_fwd") == [], "refused before AITER was called"
    out, lse = backend.decode(q, cache, meta.decode, sm_scale=SM_SCALE)
    assert lse is None and not out.isnan().any()
    assert standin.calls_to("mla_decode_fwd")[-1].kwargs["return_lse"] is False


def test_the_stand_in_aborts_where_aiter_would(rocm, monkeypatch) -> None:
    """With the refusal switched off, the same call reaches the stand-in, which "aborts"."""
    backend, _ = rocm("gfx942", 4)
    meta, q, cache = _fp8_batch(backend, 16)
    monkeypatch.setattr(rocm_decode, "refuse_abort", lambda *args, **kwargs: None)
    with pytest.raises(AiterAbort, match=r"cannot get heuristic kernel.*lse:1"):
        rocm_decode.aiter_decode(
            backend.runtime(), q, cache, meta.decode, sm_scale=SM_SCALE, q_scale=1.0,
            kv_scale=1.0, return_lse=True,
        )  # fmt: skip
    meta64, q64, cache64 = _fp8_batch(backend, 64)  # the one gfx942 LSE kernel: no abort
    _, lse = backend.decode(q64, cache64, meta64.decode, sm_scale=SM_SCALE)
    assert lse is not None and lse.dtype == torch.float32


def test_the_refresh_script_copies_tables_and_names_their_commit(tmp_path, capsys) -> None:
    spec = importlib.util.spec_from_file_location(
        "refresh", REPO / "scripts" / "refresh_aiter_tables.py"
    )
    assert spec is not None and spec.loader is not None
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    source, out = tmp_path / "aiter", tmp_path / "tables"
    for arch in ("gfx942", "gfx950"):
        (source / "hsa" / arch / "mla").mkdir(parents=True)
        text = (TABLES / "hsa" / arch / "mla" / "mla_asm.csv").read_text(encoding="utf-8")
        if arch == "gfx942":  # a newer AITER: one more LSE kernel
            text += "\nbf16,bf16,16,1,4,0,1,1,_ZN5aiter_new_lse_psE,new.co\n"
        (source / "hsa" / arch / "mla" / "mla_asm.csv").write_text(text, encoding="utf-8")
    assert refresh.main(["--source", str(source), "--commit", "abc123", "--tables", str(out)]) == 0
    assert (
        "gfx942 + _ZN5aiter_new_lse_psE (bf16, bf16, 16, True, 4, True)" in capsys.readouterr().out
    )
    manifest = json.loads((out / "MANIFEST.json").read_text(encoding="utf-8"))
    assert manifest["aiter_commit"] == "abc123" and len(manifest["tables"]) == 2
    (source / "hsa" / "gfx950" / "mla" / "mla_asm.csv").write_text(
        "qType,kvType\n", encoding="utf-8"
    )
    with pytest.raises(ValueError, match="line 1: no column"):
        refresh.main(["--source", str(source), "--commit", "abc123", "--tables", str(out)])
