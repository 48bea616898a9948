"""Mechanisms of the audit's last round, each both ways: classes defined in a function,
helpers a consumer hands the record to, private helper methods, candidates that read
nothing from layers, and the receivers of a transformed record."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from conformance.audit import Options, run_audit

_TREE = runpy.run_path(str(Path(__file__).with_name("mechanism_tree.py")))
engine_files = _TREE["engine_files"]
REGISTRY = _TREE["REGISTRY"]


def _errors(tmp_path, write_tree, files: dict[str, str], keep: str = ""):
    root = write_tree(tmp_path, {**engine_files(keep), **files})
    report = run_audit([root], options=Options(jobs=1))
    errors = [f for f in report.findings if f.severity == "error"]
    return sorted((Path(f.path).name, f.code, f.names) for f in errors), errors


# ----------------------------------------------------------------- classes in a function

WORKER = """\
    class Worker:
        def __init__(self):
            self.ready = True
            self.model = None

        def step(self):
            return self.ready, self.model.run()
    """


@pytest.mark.parametrize(
    ("fill", "expected"),
    [
        ("w.model = StubModel()", [("test_worker.py", "STUB004", ("ready",))]),
        ("w.model = StubModel()\n    w.ready = True", []),
    ],
)
def test_a_stand_in_of_a_class_defined_in_the_test_function(tmp_path, write_tree, fill, expected):
    """``StubWorker`` is defined inside the test (vLLM 0.30.0's ``StubSpeculator``): it is
    resolved like a module-level class, its base's methods included."""
    test = (
        "from pkg.worker import Worker\n\n\n"
        "def test_it():\n"
        "    class StubWorker(Worker):\n"
        "        def extra(self): ...\n\n"
        "    class StubModel:\n"
        "        def run(self):\n"
        "            return 1\n\n"
        "    w = object.__new__(StubWorker)\n"
        f"    {fill}\n"
        "    w.step()\n"
    )
    found, errors = _errors(
        tmp_path, write_tree, {"pkg/worker.py": WORKER, "tests/test_worker.py": test}
    )
    assert found == expected
    if expected:
        assert "object.__new__(StubWorker)" in errors[0].message


@pytest.mark.parametrize(
    ("dims", "expected"),
    [
        ("", [("test_layer.py", "STUB001", ("kv_lora_rank",))]),
        ("\n            self.kv_lora_rank = 1", []),
    ],
)
def test_a_layer_stub_class_defined_in_the_test_function(tmp_path, write_tree, dims, expected):
    test = (
        "from pkg.builders import ABuilder\n\n\n"
        "def test_it(cfg):\n"
        "    class Layer:\n"
        "        def __init__(self):\n"
        f"            self.prefill_backend = 1{dims}\n\n"
        '    cfg.compilation_config.static_forward_context["l"] = Layer()\n'
        '    ABuilder(["l"], cfg)\n'
    )
    found, _ = _errors(tmp_path, write_tree, {"tests/test_layer.py": test})
    assert found == expected


# ----------------------------------------------------------------- hand-offs to helpers

HELPERS = """\
    from pkg.record import CommonAttentionMetadata


    def split_all(common_attn_metadata: CommonAttentionMetadata, threshold):
        if common_attn_metadata.num_reqs <= threshold:
            return common_attn_metadata.num_reqs, 0
        assert common_attn_metadata.encoder_lens is not None
        return 0, common_attn_metadata.num_reqs
    """
HELPED = """\
    from pkg.helpers import split_all
    from pkg.record import CommonAttentionMetadata


    class HelpedBuilder:
        def build(self, common_attn_metadata: CommonAttentionMetadata):
            {call}
            return common_attn_metadata.query_start_loc[0]
    """
EXTRA = """
        def _extra(self, common_attn_metadata: CommonAttentionMetadata):
            return common_attn_metadata.dcp_lens[0]
"""


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        # the AITER FA shape: build hands the record to a helper that asserts a field
        ("split_all(common_attn_metadata, 1)", [("CAM001", ("encoder_lens",))]),
        ("if self.enabled:\n                split_all(common_attn_metadata, 1)", []),
        # a private helper method: its reads count where it is called whenever build runs
        ("self._extra(common_attn_metadata)", [("CAM001", ("dcp_lens",))]),
        ("if self.enabled:\n                self._extra(common_attn_metadata)", []),
    ],
)
def test_helpers_a_consumer_hands_the_record_to(tmp_path, write_tree, call, expected):
    site = (
        "from pkg.helped import HelpedBuilder\n"
        "from pkg.record import CommonAttentionMetadata as CAM\n\n\n"
        "def f(t, n):\n    return HelpedBuilder().build(CAM(t, n))\n"
    )
    files = {
        "pkg/helpers.py": HELPERS,
        "pkg/helped.py": HELPED.replace("{call}", call) + (EXTRA if "_extra" in call else ""),
        "benchmarks/site.py": site,
    }
    found, errors = _errors(tmp_path, write_tree, files)
    assert [(code, names) for _, code, names in found] == expected
    if expected:
        assert "(read by HelpedBuilder.build)" in errors[0].message


# ----------------------------------------------------------------- candidates without layer reads

NO_LAYERS = """\
    from pkg.record import CommonAttentionMetadata


    class QuietBuilder:
        def build(self, common_attn_metadata: CommonAttentionMetadata):
            return common_attn_metadata.encoder_lens[0]


    class QuietBackend:
        @staticmethod
        def get_builder_cls():
            return QuietBuilder
    """
RUNNER = """\
    from types import SimpleNamespace as NS

    from pkg.record import CommonAttentionMetadata
    from pkg.registry import BackendEnum


    def run(cfg, name, t, n):
        cfg.compilation_config.static_forward_context = {"l": NS(scale=1.0)}
        builder = BackendEnum[name].value.get_builder_cls()(["l"], cfg)
        return builder.build(CommonAttentionMetadata(query_start_loc=t, num_reqs=n{passes}))
    """


@pytest.mark.parametrize(
    ("passes", "expected"),
    [
        ("", [("CAM001", ("positions", "encoder_lens"))]),
        (", positions=t, encoder_lens=t", []),
    ],
)
def test_a_candidate_reading_nothing_from_layers_can_be_picked(
    tmp_path, write_tree, passes, expected
):
    """The stub carries ``scale`` only: PlainBuilder (reads it) and QuietBuilder (reads no
    layer attribute: any stub serves it) can be picked; the MLA family (reads
    ``kv_lora_rank``) cannot, so its ``seq_lens_cpu_upper_bound`` is not required."""
    registry = REGISTRY.replace(
        'PLAIN = "pkg.builders.PlainBackend"',
        'PLAIN = "pkg.builders.PlainBackend"\n        QUIET = "pkg.quiet.QuietBackend"',
    )
    files = {
        "pkg/registry.py": registry,
        "pkg/quiet.py": NO_LAYERS,
        "benchmarks/runner.py": RUNNER.replace("{passes}", passes),
    }
    found, errors = _errors(tmp_path, write_tree, files)
    assert [(code, names) for _, code, names in found] == expected
    if expected:
        assert "PlainBuilder and QuietBuilder need it (2 of the 2 consumers" in errors[0].message


# ----------------------------------------------------------------- receivers of a transformation

PROPOSER = """\
    from pkg.record import CommonAttentionMetadata


    def shift(common_attn_metadata: CommonAttentionMetadata):
        return common_attn_metadata.{read}[0]


    class Proposer:
        def prepare(self, common_attn_metadata: CommonAttentionMetadata):
            if self.padded:
                return shift(common_attn_metadata)
            return common_attn_metadata.query_start_loc

        def own_record(self, t, n):
            return CommonAttentionMetadata(query_start_loc=t, num_reqs=n)
    """
MODEL_RUNNER = """\
    from pkg.proposer import Proposer


    class ModelRunner:
        def __init__(self):
            self.drafter = Proposer()

        def _build(self, common_attn_metadata, n):
            spec_decode_common_attn_metadata = common_attn_metadata.unpadded(n)
            return spec_decode_common_attn_metadata

        def propose(self, common_attn_metadata, n):
            spec_decode_common_attn_metadata = self._build(common_attn_metadata, n)
            return self.drafter.prepare(spec_decode_common_attn_metadata)
    """


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        # the drafter's helper (reached on one branch) asserts the dropped field
        ("seq_lens_cpu_upper_bound", [("record.py", "CAM001", ("seq_lens_cpu_upper_bound",))]),
        # it reads a field the rebuild keeps: the rebuild is fine for its receivers, and
        # so is the proposer's own record that drops the same fields (reaches no consumer)
        ("positions", []),
    ],
)
def test_a_transformation_is_judged_by_its_receivers(tmp_path, write_tree, read, expected):
    files = {
        "pkg/proposer.py": PROPOSER.replace("{read}", read),
        "pkg/model_runner.py": MODEL_RUNNER,
    }
    found, errors = _errors(tmp_path, write_tree, files)
    assert found == expected
    if expected:
        assert "(read by shift)" in errors[0].message
