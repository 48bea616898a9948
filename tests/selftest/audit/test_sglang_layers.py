"""SGLang's layer doubles: a layer handed to a backend's forward methods
(``backend.forward_decode(q, k, v, layer, forward_batch)``) is judged as a layer stub
(STUB001/STUB002) against what the method reads from ``layer`` on every path, or by what the
facts measured a decode forward to require.

Negative controls: a ``SimpleNamespace`` layer without the ``layer_id`` the triton backend's
``forward_decode`` reads is a finding, the complete one is clean; a real ``RadixAttention``
is no stub.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from conformance.audit import Options, run_audit
from conformance.audit.sites import SGLANG
from conformance.engines.facts import read_facts

from doc_lists import ROOT

_TREE = runpy.run_path(str(Path(__file__).with_name("sglang_tree.py")))
sglang_files = _TREE["sglang_files"]
layer_facts_of = _TREE["layer_facts_of"]
FACTS = read_facts(ROOT / "reports" / "engines" / f"sglang-{_TREE['VERSION']}.facts.json")
TEST = "sglang/test/test_layer_double.py"

DOUBLE = """\
    from types import SimpleNamespace

    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.layers.radix_attention import RadixAttention


    class FakeLayer:
        def __init__(self):
{fake}


    def test_forward(runner, q, batch, dims):
        backend = {backend}(runner)
        layer = {layer}
        {call}
    """


def _audit(
    tmp_path, write_tree, *, facts=None, backend="TritonAttnBackend", template=DOUBLE, **parts
):
    attrs = layer_facts_of(FACTS, "triton")
    lacks = parts.pop("lacks", ())
    kept = [a for a in attrs if a not in lacks]
    defaults = {
        "layer": f"SimpleNamespace({', '.join(f'{a}=1' for a in kept)})",
        "call": "backend.forward_decode(q, q, q, layer, batch)",
        "fake": "\n".join(f"            self.{a} = 1" for a in kept) or "            pass",
    }
    defaults.update(parts)
    test = template.replace("{backend}", backend)
    for key, value in defaults.items():
        test = test.replace("{" + key + "}", value)
    files = sglang_files(FACTS, aiter_decode=parts.get("aiter_decode", ""))
    files[TEST] = test
    report = run_audit(
        [write_tree(tmp_path, files)], options=Options(jobs=1), facts=facts, sites=SGLANG
    )
    assert report.problems == []
    return [(f.code, f.names) for f in report.findings if f.code.startswith("STUB00")], report


def test_a_layer_double_without_what_forward_decode_reads_is_found(tmp_path, write_tree):
    found, report = _audit(tmp_path / "seeded", write_tree, lacks=["layer_id"])
    assert found == [("STUB001", ("layer_id",))]
    message = report.findings[0].message
    assert message.startswith("layer stub SimpleNamespace(...) handed to forward_decode at line ")
    assert message.endswith(
        " in test_forward lacks layer_id (read by TritonAttnBackend.forward_decode; reached: "
        "TritonAttnBackend named in test_forward)"
    ), message
    assert report.context["stubs"]["judged"] == 1
    fixed, report = _audit(tmp_path / "fixed", write_tree)
    assert fixed == []  # and no STUB003: SGLang looks layers up by no type
    assert report.context["stubs"]["judged"] == 1


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ({"call": "backend.forward_decode(q, q, q, layer=layer, forward_batch=batch)"}, "found"),
        ({"layer": "FakeLayer()"}, "found"),
        ({"layer": "dict(**dims)"}, "unverifiable"),  # every read: STUB002
        ({"layer": "RadixAttention(4, 64, 0)"}, []),  # the engine's layer: no stub
        ({"call": "backend.forward_decode(q, q, q, self.attn, batch)"}, []),  # not read
        ({"call": "backend.forward_decode(*q, layer, batch)"}, []),  # where it goes is unknown
    ],
)
def test_layer_doubles_of_each_shape(tmp_path, write_tree, parts, expected):
    found, _ = _audit(tmp_path, write_tree, lacks=["layer_id"], **parts)
    if expected == "unverifiable":
        assert [code for code, _ in found] == ["STUB002"]
        assert set(found[0][1]) == set(layer_facts_of(FACTS, "triton"))
    else:
        assert found == ([("STUB001", ("layer_id",))] if expected == "found" else expected)


@pytest.mark.parametrize(
    ("call", "lacks", "expected"),
    [
        # forward_extend reads tp_q_head_num on every path, verify_only on one mode only
        ("backend.forward_extend(q, q, q, layer, batch)", ["verify_only"], []),
        ("backend.forward_extend(q, q, q, layer, batch)", ["tp_q_head_num"], ["tp_q_head_num"]),
        # forward reads layer_id itself, and dispatches on the batch's mode
        ("backend.forward(q, q, q, layer, batch)", ["layer_id"], ["layer_id"]),
        ("backend.forward(q, q, q, layer, batch)", ["scaling"], []),
    ],
)
def test_each_forward_method_requires_what_it_reads_on_every_path(
    tmp_path, write_tree, call, lacks, expected
):
    found, report = _audit(tmp_path, write_tree, lacks=lacks, call=call)
    assert [names for _, names in found] == ([tuple(expected)] if expected else [])
    if call.startswith("backend.forward("):
        assert not expected or "read by AttentionBackend.forward;" in report.findings[0].message


def test_a_patched_forward_method_requires_nothing(tmp_path, write_tree):
    call = "monkeypatch.setattr(TritonAttnBackend, 'forward_decode', lambda *a: q)\n"
    call += "        backend.forward_decode(q, q, q, layer, batch)"
    found, _ = _audit(tmp_path, write_tree, lacks=["layer_id"], call=call)
    assert found == []


def test_measured_facts_judge_a_layer_handed_to_forward_decode(tmp_path, write_tree):
    # AiterAttnBackend.forward_decode reads static_only too, which the facts did not see it
    # require; its forward_extend stays judged by its reads
    decode = "\n".join(
        [f"self.l{n} = layer.{a}" for n, a in enumerate(layer_facts_of(FACTS, "aiter"))]
        + ["self.extra = layer.static_only"]
    )
    attrs = [*layer_facts_of(FACTS, "aiter"), "static_only"]
    common = {"backend": "AiterAttnBackend", "aiter_decode": decode}

    def layer(*left_out):
        return f"SimpleNamespace({', '.join(f'{a}=1' for a in attrs if a not in left_out)})"

    static, _ = _audit(tmp_path / "s", write_tree, layer=layer("static_only"), **common)
    assert static == [("STUB001", ("static_only",))]
    measured, _ = _audit(
        tmp_path / "m", write_tree, layer=layer("static_only"), facts=FACTS, **common
    )
    assert measured == []
    found, report = _audit(
        tmp_path / "v", write_tree, layer=layer("v_scale"), facts=FACTS, **common
    )
    assert found == [("STUB001", ("v_scale",))]
    message = report.findings[0].message
    assert "(read by aiter (measured); measured: aiter without v_scale: AttributeError" in message
    extend = "backend.forward_extend(q, q, q, layer, batch)"
    found, _ = _audit(
        tmp_path / "e", write_tree, layer=layer("tp_q_head_num"), call=extend, facts=FACTS, **common
    )
    assert found == [("STUB001", ("tp_q_head_num",))]


def test_a_layer_handed_to_a_backend_chosen_at_run_time_is_judged_by_each_candidate(
    tmp_path, write_tree
):
    # the registry holds the measured builders; xai_temperature_len is triton's alone
    parts = {
        "backend": "ATTENTION_BACKENDS[name]",
        "call": "backend.forward_decode(q, q, q, layer, batch)",
    }
    kept = sorted(
        {a for b in ("aiter", "triton", "torch_native") for a in layer_facts_of(FACTS, b)}
        - {"xai_temperature_len"}
    )
    layer = f"SimpleNamespace({', '.join(f'{a}=1' for a in kept)})"
    files_test = DOUBLE.replace(
        "from types import SimpleNamespace\n",
        "from types import SimpleNamespace\n\n"
        "    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS\n",
    )
    found, report = _audit(
        tmp_path, write_tree, facts=FACTS, layer=layer, template=files_test, **parts
    )
    assert found == [("STUB001", ("xai_temperature_len",))]
    message = report.findings[0].message
    assert "chosen at run time from ATTENTION_BACKENDS" in message
    assert "TritonAttnBackend needs it" in message, message
