"""The audit on an SGLang tree, judged by SGLang's committed facts: its record
(``ForwardBatch``, filled after it is built), its builders (each backend's
``init_forward_metadata``, constructed over a model runner through ``ATTENTION_BACKENDS``).

Negative controls: a test kit whose model config lacks the ``dtype`` SGLang's
``AiterAttnBackend.__init__`` was measured to require (#38, the #52139 shape one level up)
is a STUB005 finding, and the kit that carries it is clean; a batch maker that leaves out a
field a measured backend needed is a CAM001 finding, and one that fills it after building the
batch is clean.
"""

from __future__ import annotations

import json
import runpy
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.audit import Options, run_audit
from conformance.audit.sites import SGLANG, sites_for
from conformance.engines.facts import FactsError, read_facts, write_facts

from doc_lists import ROOT
from engine_facts import make_facts

_TREE = runpy.run_path(str(Path(__file__).with_name("sglang_tree.py")))
sglang_files = _TREE["sglang_files"]
FACTS_DIR = ROOT / "reports" / "engines"
FACTS = read_facts(FACTS_DIR / f"sglang-{_TREE['VERSION']}.facts.json")
KIT = "sglang/test/kits/mla_kit.py"


def _audit(tmp_path: Path, write_tree, facts=FACTS, **files_options):
    root = write_tree(tmp_path, sglang_files(FACTS, **files_options))
    report = run_audit([root], options=Options(jobs=1), facts=facts, sites=SGLANG)
    found = [(Path(f.path).name, f.code, f.names) for f in report.findings]
    return found, report


def test_the_committed_facts_name_sglang_s_record_and_the_backends_the_kit_reaches():
    assert sites_for(FACTS) is SGLANG
    assert FACTS.record_class.endswith(".ForwardBatch")
    assert "model_config.dtype" in FACTS.builders["aiter"].required
    assert "model_config.dtype" not in FACTS.builders["triton"].required


def test_a_kit_model_config_without_dtype_is_found_and_the_fixed_one_is_clean(tmp_path, write_tree):
    found, report = _audit(tmp_path / "seeded", write_tree, config_lacks=["dtype"])
    assert found == [("mla_kit.py", "STUB005", ("model_config.dtype",))]
    message = report.findings[0].message
    assert "MockRunner(...) handed to ATTENTION_BACKENDS[...]" in message
    assert "aiter (measured) needs it" in message and "fine for torch_native and triton" in message
    assert "aiter without model_config.dtype: AttributeError" in message
    assert report.context["stubs"]["runner_stubs_judged"] == 1
    fixed, report = _audit(tmp_path / "fixed", write_tree)
    assert fixed == []
    assert report.context["stubs"]["runner_stubs_judged"] == 1


def test_a_config_lacking_what_two_backends_require_names_both(tmp_path, write_tree):
    found, report = _audit(tmp_path, write_tree, config_lacks=["dtype", "head_dim"])
    assert found == [("mla_kit.py", "STUB005", ("model_config.dtype", "model_config.head_dim"))]
    assert "aiter and triton (measured) need it" in report.findings[0].message


def test_without_facts_a_runner_stub_is_judged_by_the_constructors_reads(tmp_path, write_tree):
    # each backend's __init__ reads what it was measured to require; ATTENTION_BACKENDS
    # stands for the backends its registering functions construct
    root = write_tree(tmp_path / "seeded", sglang_files(FACTS, config_lacks=["dtype"]))
    report = run_audit([root], options=Options(jobs=1), sites=SGLANG)
    assert [(f.code, f.names) for f in report.findings] == [("STUB005", ("model_config.dtype",))]
    message = report.findings[0].message
    assert "handed to ATTENTION_BACKENDS[...] (chosen at run time among the backends it" in message
    assert "(read by AiterAttnBackend.__init__; AiterAttnBackend needs it (1 of the 3" in message
    assert "fine for TorchNativeAttnBackend and TritonAttnBackend" in message
    assert report.context["stubs"]["runner_stubs_judged"] == 1
    root = write_tree(tmp_path / "fixed", sglang_files(FACTS))
    assert run_audit([root], options=Options(jobs=1), sites=SGLANG).findings == []


def test_the_package_folder_audited_itself_names_its_modules_as_sglang_does(tmp_path, write_tree):
    # SGLang 0.5.23's srt/ folders are namespace packages (no __init__.py): a module under
    # them is still sglang.srt.... when the PATH given is the sglang package folder itself
    files = sglang_files(FACTS, config_lacks=["dtype"])
    for folder in ("sglang/srt", "sglang/srt/layers", "sglang/srt/layers/attention"):
        del files[f"{folder}/__init__.py"]
    root = write_tree(tmp_path, files)
    for path in (root, root / "sglang"):
        report = run_audit([path], options=Options(jobs=1), sites=SGLANG)
        found = [(f.code, f.names) for f in report.findings]
        assert found == [("STUB005", ("model_config.dtype",))], path


@pytest.mark.parametrize(
    ("init", "expected"),
    [
        ("self.dtype = model_runner.model_config.dtype", [("model_config.dtype",)]),
        (
            "config = model_runner.model_config\nself.dtype = config.dtype",
            [("model_config.dtype",)],
        ),
        (
            "self.model_runner = model_runner\nself.dtype = self.model_runner.model_config.dtype",
            [("model_config.dtype",)],
        ),
        ("self.dtype = getattr(model_runner.model_config, 'dtype')", [("model_config.dtype",)]),
        # read on some paths only, or not read: no requirement
        ("if model_runner.device:\n    self.dtype = model_runner.model_config.dtype", []),
        (
            "if model_runner.device is None:\n    raise ValueError('no device')\n"
            "self.dtype = model_runner.model_config.dtype",
            [],
        ),
        ("self.dtype = getattr(model_runner.model_config, 'dtype', None)", []),
        ("self.dtype = lambda: model_runner.model_config.dtype", []),
        ("model_runner.model_config.dtype = None", []),
    ],
)
def test_a_constructor_requires_what_it_reads_from_the_runner_on_every_path(
    tmp_path, write_tree, init, expected
):
    files = sglang_files(FACTS, config_lacks=["dtype"], aiter_init=init)
    report = run_audit([write_tree(tmp_path, files)], options=Options(jobs=1), sites=SGLANG)
    assert [f.names for f in report.findings] == expected, report.to_text()


@pytest.mark.parametrize(
    ("call", "expected"),
    [("super().__init__(model_runner)", [("model_config.dtype",)]), ("super().__init__()", [])],
)
def test_a_backend_constructed_by_name_is_judged_with_the_bases_it_hands_the_runner_to(
    tmp_path, write_tree, call, expected
):
    files = sglang_files(FACTS, config_lacks=["dtype"])
    files["sglang/srt/layers/attention/fancy_backend.py"] = f"""\
        from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend


        class FancyAttnBackend(AiterAttnBackend):
            def __init__(self, model_runner):
                {call}
        """
    files[KIT] = (
        files[KIT]
        .replace("ATTENTION_BACKENDS[case.backend](runner)", "FancyAttnBackend(runner)")
        .replace(
            "from sglang.srt.model_executor.model_runner import ModelRunner",
            "from sglang.srt.model_executor.model_runner import ModelRunner\n"
            "    from sglang.srt.layers.attention.fancy_backend import FancyAttnBackend",
        )
    )
    report = run_audit([write_tree(tmp_path, files)], options=Options(jobs=1), sites=SGLANG)
    assert report.problems == []
    assert [f.names for f in report.findings] == expected, report.to_text()
    if expected:
        assert "handed to FancyAttnBackend in build_fixture" in report.findings[0].message
        assert "(read by AiterAttnBackend.__init__; FancyAttnBackend needs it)" in (
            report.findings[0].message
        )


def test_measured_facts_take_precedence_over_the_constructors_reads(tmp_path, write_tree):
    # AiterAttnBackend.__init__ also reads model_config.only_read, which the kit lacks and the
    # measured aiter backend did not require
    init = "\n".join(
        [f"self.r{n} = model_runner.{p}" for n, p in enumerate(_TREE["facts_of"](FACTS, "aiter"))]
        + ["self.extra = model_runner.model_config.only_read"]
    )
    root = write_tree(tmp_path, sglang_files(FACTS, aiter_init=init))
    static = run_audit([root], options=Options(jobs=1), sites=SGLANG)
    assert [f.names for f in static.findings] == [("model_config.only_read",)]
    assert run_audit([root], options=Options(jobs=1), facts=FACTS).findings == []


def test_a_field_filled_after_the_batch_is_built_counts_as_passed(tmp_path, write_tree):
    found, report = _audit(tmp_path / "seeded", write_tree, later_lacks=["extend_seq_lens"])
    assert found == [("mla_kit.py", "CAM001", ("extend_seq_lens",))]
    message = report.findings[0].message
    assert message.startswith("ForwardBatch(...) in make_batch leaves out extend_seq_lens")
    assert "chosen at run time from ATTENTION_BACKENDS" in message
    assert "(measured on decode/mixed/prefill batches)" in message
    assert _audit(tmp_path / "fixed", write_tree)[0] == []


def test_a_literal_decode_batch_is_judged_on_decodes_only(tmp_path, write_tree):
    # make_decode_batch passes ForwardMode.DECODE and sets none of the extend fields, which
    # the backends were measured to need on mixed and extend batches only
    assert _audit(tmp_path / "decode", write_tree)[0] == []
    files = sglang_files(FACTS)
    files[KIT] = files[KIT].replace("forward_mode=ForwardMode.DECODE", "forward_mode=runner.mode")
    root = write_tree(tmp_path / "any", files)
    report = run_audit([root], facts=FACTS, options=Options(jobs=1))
    [finding] = report.findings
    assert (finding.code, finding.qualname) == ("CAM001", "make_decode_batch")
    assert set(finding.names) == set(_TREE["needed_fields"](FACTS))


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        ("self.p = forward_batch.positions.max()", [("positions",)]),
        # a read on some modes of the batch only: not required of every batch
        (
            "if forward_batch.forward_mode.is_target_verify():\n"
            "    self.p = forward_batch.positions.max()",
            [],
        ),
        (
            "if not forward_batch.forward_mode.is_extend():\n"
            "    return\n"
            "self.p = forward_batch.positions.max()",
            [],
        ),
    ],
)
def test_static_reads_on_some_modes_only_are_not_required(tmp_path, write_tree, read, expected):
    root = write_tree(tmp_path, sglang_files(FACTS, plain_read=read))
    report = run_audit([root], options=Options(jobs=1), sites=SGLANG)
    assert [f.names for f in report.findings if f.code == "CAM001"] == expected
    if expected:
        assert "read by PlainAttnBackend.init_forward_metadata" in report.findings[0].message


def test_a_model_runner_is_a_driver_of_the_batch_not_a_consumer(tmp_path, write_tree):
    # ModelRunner.forward dereferences split_index, and the kit names MockRunner(ModelRunner):
    # only classes with init_forward_metadata consume SGLang's batch
    root = write_tree(tmp_path, sglang_files(FACTS))
    every_class = replace(SGLANG, consumer_method="")
    charged = [("make_batch", ("split_index",)), ("make_decode_batch", ("split_index",))]
    for sites, expected in ((SGLANG, []), (every_class, charged)):
        report = run_audit([root], options=Options(jobs=1), facts=FACTS, sites=sites)
        assert sorted((f.qualname, f.names) for f in report.findings) == expected


def test_the_command_line_picks_sglang_s_facts_by_the_tree_s_release(tmp_path, write_tree, run_cli):
    root = write_tree(tmp_path / "tree", sglang_files(FACTS, config_lacks=["dtype"]))
    status, out, err = run_cli(str(root), "--facts", str(FACTS_DIR), "--format", "json")
    assert status == 1, err
    assert f"judging sglang {_TREE['VERSION']} (read from sglang/_version.py)" in err
    document = json.loads(out)
    assert [f["code"] for f in document["findings"]] == ["STUB005"]
    assert document["facts"]["engine"] == "sglang"
    status, out, _ = run_cli(str(root), "--facts", str(FACTS_DIR), "--format", "sarif")
    rules = {r["id"]: r for r in json.loads(out)["runs"][0]["tool"]["driver"]["rules"]}
    assert list(rules) == list(SGLANG.rules)
    assert "ForwardBatch" in rules["CAM005"]["shortDescription"]["text"]


def test_facts_of_another_engine_than_the_tree_s_are_refused(tmp_path, write_tree, run_cli):
    root = write_tree(tmp_path / "tree", sglang_files(FACTS))
    vllm_facts = tmp_path / "vllm.json"
    write_facts(vllm_facts, make_facts())
    for argv in (
        ("--facts", str(vllm_facts)),
        ("--facts", str(FACTS_DIR / f"sglang-{_TREE['VERSION']}.facts.json"), "--engine", "vllm"),
    ):
        status, out, err = run_cli(str(root), *argv)
        assert status == 2 and out == ""
        [line] = err.strip().splitlines()
        assert line.startswith("audit: error: ") and "engine" in line


def test_facts_whose_record_is_not_the_engine_s_are_refused():
    wrong = replace(make_facts(), engine="sglang")
    with pytest.raises(FactsError, match="is not sglang's record ForwardBatch"):
        sites_for(wrong)


def test_a_name_rebound_to_the_backend_built_from_it_is_no_stub(tmp_path, write_tree):
    # ``backend = LocalAttnBackend(backend)``: the argument is what the name held before (a
    # parameter), not the ad-hoc backend the call builds
    files = sglang_files(FACTS, plain_read="self.p = 1")
    files["sglang/test/test_plain.py"] += """

    class LocalAttnBackend(PlainAttnBackend):
        pass


    def make(backend):
        backend = LocalAttnBackend(backend)
        return backend
    """
    report = run_audit([write_tree(tmp_path, files)], options=Options(jobs=1), sites=SGLANG)
    assert report.problems == []
    assert report.context["stubs"]["runner_stubs_judged"] == 1  # the kit's runner only
