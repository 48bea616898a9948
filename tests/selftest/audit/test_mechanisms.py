"""Each reach and requirement mechanism of the audit, both ways: the bug is reported with
exactly its names; the guarded, unreached or replaced read is not.

The package under test is `mechanism_tree`; each test adds one site or stub file.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from conformance.audit import Options, run_audit

_TREE = runpy.run_path(str(Path(__file__).with_name("mechanism_tree.py")))
engine_files = _TREE["engine_files"]
REGISTRY = _TREE["REGISTRY"]


def _found(tmp_path, write_tree, files: dict[str, str], keep: str = "", **kwargs):
    root = write_tree(tmp_path, {**engine_files(keep), **files})
    report = run_audit([root], options=Options(jobs=1), **kwargs)
    errors = [f for f in report.findings if f.severity == "error"]
    return sorted((Path(f.path).name, f.code, f.names) for f in errors), report


SITE = """\
    from types import SimpleNamespace as NS

    from pkg.builders import ABuilder, BBuilder, CommonBuilder, PlainBuilder
    from pkg.record import CommonAttentionMetadata as CAM
    from pkg.registry import BackendEnum, SpecConfig

    {body}
    """


def _site(body: str) -> dict[str, str]:
    return {"tests/test_site.py": SITE.replace("{body}", body.replace("\n", "\n    "))}


def _codes(tmp_path, write_tree, body: str) -> list[tuple[str, tuple[str, ...]]]:
    """The (code, names) of each error the audit reports on a site of `body`."""
    found, _ = _found(tmp_path, write_tree, _site(body))
    return [(code, names) for _, code, names in found]


def _builds_layer(signature: str, layer: str, setup: str = "", builder: str = "ABuilder") -> str:
    """A site function that runs `setup`, registers `layer` as layer "l" and builds
    `builder` over it."""
    setup_line = f"    {setup}\n" if setup else ""
    return (
        f"def {signature}:\n{setup_line}"
        f'    cfg.compilation_config.static_forward_context["l"] = {layer}\n'
        f'    return {builder}(["l"], cfg)'
    )


# ----------------------------------------------------------------- reach


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # the bug: a site reaching the MLA family leaves out the field its build asserts
        (
            "def f(t, n):\n    return ABuilder, CAM(t, n)",
            [("CAM001", ("seq_lens_cpu_upper_bound",))],
        ),
        # a config class whose parser returns the registry enum reaches no builder
        ("def f(t, n):\n    SpecConfig()\n    return CAM(t, n)", []),
        # a static helper handed the record is charged with that helper only
        ("def f(t, n):\n    return CommonBuilder.count(CAM(t, n))", []),
        # a helper naming no builder does not fall back to what another function names
        ("def f(t, n):\n    return CAM(t, n)\n\n\ndef g():\n    return ABuilder", []),
        # ... but a helper on a builder's call chain reaches it
        (
            "def f(t, n):\n    return CAM(t, n)\n\n\ndef g(t, n):\n    return ABuilder, f(t, n)",
            [("CAM001", ("seq_lens_cpu_upper_bound",))],
        ),
    ],
)
def test_construction_reach(tmp_path, write_tree, body, expected):
    assert _codes(tmp_path, write_tree, body) == expected


def test_module_level_reach(tmp_path, write_tree):
    body = "BUILDER = BackendEnum.A.get_builder_cls()\n\n\n" + _builds_layer(
        "make(cfg, pb)", "NS(prefill_backend=pb)", builder="BUILDER"
    )
    found, report = _found(tmp_path, write_tree, _site(body))
    assert found == [("test_site.py", "STUB001", ("kv_lora_rank",))]
    [finding] = [f for f in report.findings if f.code == "STUB001"]
    assert "CommonBuilder.__init__" in finding.message
    assert "named in module-level BUILDER, used in make" in finding.message


@pytest.mark.parametrize(
    ("dims", "expected"), [("", [("STUB001", ("kv_lora_rank",))]), (", kv_lora_rank=1", [])]
)
def test_a_fixture_is_reached_from_the_test_naming_it(tmp_path, write_tree, dims, expected):
    body = (
        "import pytest\n\n\n"
        "@pytest.fixture\n"
        "def layer_ctx(cfg, pb):\n"
        f'    cfg.compilation_config.static_forward_context["l"] = NS(prefill_backend=pb{dims})\n'
        "    return cfg\n\n\n"
        "def test_it(layer_ctx):\n"
        '    ABuilder(["l"], layer_ctx)'
    )
    assert _codes(tmp_path, write_tree, body) == expected


def test_several_builders_are_all_judged(tmp_path, write_tree):
    """The stub satisfies the first builder it reaches and not the second: judging by the
    first builder only would pass it."""
    body = (
        "def make(cfg, pb):\n"
        "    ctx = cfg.compilation_config.static_forward_context\n"
        '    ctx["l"] = NS(prefill_backend=pb, kv_lora_rank=1)\n'
        '    return ABuilder(["l"], cfg), PlainBuilder(["l"], cfg)'
    )
    found, report = _found(tmp_path, write_tree, _site(body))
    assert found == [("test_site.py", "STUB001", ("scale",))]
    assert "PlainBuilder.__init__" in report.findings[0].message
    site = "def f(t, n):\n    return ABuilder, PlainBuilder, CAM(t, n, seq_lens_cpu_upper_bound=t)"
    found, _ = _found(tmp_path / "b", write_tree, _site(site))
    assert found == [("test_site.py", "CAM001", ("positions",))]  # PlainBuilder's read


# ----------------------------------------------------------------- guarded reads


def test_guarded_reads_are_no_requirement(tmp_path, write_tree):
    """`build` reads five optional fields; only the prefill-path assert is unguarded: the
    None-fallback local, the config-flag branch, the comprehension over a config list and
    the presence-guarded assert are not requirements."""
    found, report = _found(
        tmp_path, write_tree, _site("def f(t, n):\n    return ABuilder, CAM(t, n)")
    )
    assert found == [("test_site.py", "CAM001", ("seq_lens_cpu_upper_bound",))]
    assert "ABuilder named in f" in report.findings[0].message


def test_prefill_path_reads_are_not_required_of_decode_only_sites(tmp_path, write_tree):
    body = (
        "def f(cfg, t, n):\n"
        "    cfg.speculative_config = NS(num_speculative_tokens=1)\n"
        "    return ABuilder, CAM(t, n)"
    )
    assert _found(tmp_path, write_tree, _site(body))[0] == []


def test_unguarded_read_of_another_builder_is_required(tmp_path, write_tree):
    body = "def f(t, n):\n    return PlainBuilder, CAM(t, n)"
    found, _ = _found(tmp_path, write_tree, _site(body))
    assert found == [("test_site.py", "CAM001", ("positions",))]


# ----------------------------------------------------------------- layer stubs


@pytest.mark.parametrize(
    ("stub", "expected"),
    [
        # the bug: the first layer lacks the dim the constructor reads
        ('{"a": NS(prefill_backend=pb), "b": NS()}', [("STUB001", ("kv_lora_rank",))]),
        # a later layer: only ``getattr(..., default)`` reads it
        ('{"a": NS(prefill_backend=pb, kv_lora_rank=1), "b": NS()}', []),
    ],
)
def test_first_layer_only_reads(tmp_path, write_tree, stub, expected):
    body = (
        "def make(cfg, pb):\n"
        f"    cfg.compilation_config.static_forward_context = {stub}\n"
        '    return ABuilder(["a", "b"], cfg)'
    )
    assert _codes(tmp_path, write_tree, body) == expected


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ("", [("STUB001", ("kv_lora_rank", "prefill_backend"))]),
        ('monkeypatch.setattr(CommonBuilder, "__init__", lambda *a: None)', []),
        ("CommonBuilder.__init__ = lambda *a: None", []),
    ],
)
def test_monkeypatched_methods_are_not_judged(tmp_path, write_tree, patch, expected):
    body = _builds_layer("test_it(monkeypatch, cfg)", "NS()", setup=patch)
    assert _codes(tmp_path, write_tree, body) == expected


@pytest.mark.parametrize(
    ("fill", "expected"),
    [
        ("stub.rank = 1", [("STUB001", ("kv_lora_rank", "prefill_backend"))]),
        ("for name, value in dims.items():\n        setattr(stub, name, value)", []),
    ],
)
def test_setattr_with_computed_names(tmp_path, write_tree, fill, expected):
    body = _builds_layer("make(cfg, dims)", "stub", setup=f"stub = NS()\n    {fill}")
    assert _codes(tmp_path, write_tree, body) == expected


def test_unrelated_flag_branch_read_is_no_requirement(tmp_path, write_tree):
    """``layer.dcp_manager`` is read under ``if self.use_dcp:`` only."""
    body = _builds_layer("make(cfg, pb)", "NS(prefill_backend=pb, kv_lora_rank=1)")
    found, report = _found(tmp_path, write_tree, _site(body))
    assert found == []
    assert report.context["stubs"]["judged"] == 1


# ----------------------------------------------------------------- stand-ins

IMPL = """\
    class Worker:
        def __init__(self):
            self.table = {}
            self.ready = True
            self.acks = []

        def finished(self):
            done = {self.table[k] for k in self.acks}
            keep = list(filter(lambda k: k in self.table, self.acks))
            return self.ready, done, keep

        def start(self):
            self._step()
            return self.ready

        def _step(self):
            return self.table
    """


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("w.acks = []\n    w.finished()", [("STUB004", ("ready",))]),  # read on every path
        ("w.acks = []\n    w.ready = True\n    w.finished()", []),  # table: lazy reads only
        (
            'for name in ("_step",):\n        setattr(w, name, MagicMock())\n    w.start()',
            [],
        ),  # methods replaced under computed names: not judged
        ("w._step = MagicMock()\n    w.start()", [("STUB004", ("ready",))]),
    ],
)
def test_standins_lazy_reads_and_computed_setattr(tmp_path, write_tree, body, expected):
    test = (
        "from unittest.mock import MagicMock\n\nfrom pkg.worker import Worker\n\n\n"
        f"def test_it():\n    w = object.__new__(Worker)\n    {body}\n"
    )
    found, _ = _found(tmp_path, write_tree, {"pkg/worker.py": IMPL, "tests/test_worker.py": test})
    assert [(code, names) for _, code, names in found] == expected


# ----------------------------------------------------------------- script-style imports

COMMON = """\
    from pkg.layers import AttentionLayerBase


    class MockLayer(AttentionLayerBase):
        def __init__(self, scale=1.0):
            self.scale = scale{dims}
    """
RUNNER = """\
    from common import MockLayer

    from pkg.registry import BackendEnum


    def _backend_config(name):
        backend = BackendEnum[name]
        return {"builder": backend.value}


    def _make(cfg, backend_cfg, pb):
        layer = MockLayer()
        layer.prefill_backend = pb
        cfg.compilation_config.static_forward_context = {"placeholder": layer}
        return backend_cfg["builder"](["placeholder"], cfg)


    def run(cfg, name, pb):
        return _make(cfg, _backend_config(name), pb)
    """
OTHER_COMMON = """\
    class MockLayer:
        def __init__(self):
            self.kv_lora_rank = 1
    """


@pytest.mark.parametrize(
    ("dims", "expected"),
    [
        ("", [("mla_runner.py", "STUB001", ("kv_lora_rank",))]),
        ("\n            self.kv_lora_rank = 1", []),
    ],
)
def test_script_style_import_and_run_time_builder(tmp_path, write_tree, dims, expected):
    """``from common import MockLayer`` in a benchmark folder names the sibling file (not
    another ``common.py`` of the tree); the builder is chosen at run time from the registry,
    so the stub is judged by what the family it is written for (it sets
    ``prefill_backend``) shares: ``CommonBuilder.__init__``."""
    files = {
        "tools/common.py": OTHER_COMMON,
        "benchmarks/attn/__init__.py": "",
        "benchmarks/attn/common.py": COMMON.replace("{dims}", dims),
        "benchmarks/attn/mla_runner.py": RUNNER,
    }
    found, report = _found(tmp_path, write_tree, files)
    assert found == expected
    if expected:
        message = report.findings[0].message
        assert "CommonBuilder.__init__" in message and "any member" not in message
        assert "chosen at run time from BackendEnum (named in _backend_config" in message
        assert "ABuilder and BBuilder need it (2 of the 3 builders it serves" in message
        assert message.endswith("; fine for PlainBuilder)")


def test_a_run_time_stub_of_another_family_is_not_judged_by_it(tmp_path, write_tree):
    """The stub carries ``scale`` only: it is written for PlainBuilder (judged, fine), not
    for the family that reads ``kv_lora_rank``."""
    runner = RUNNER.replace("layer.prefill_backend = pb\n        ", "")
    files = {
        "benchmarks/attn/common.py": COMMON.replace("{dims}", ""),
        "benchmarks/attn/runner.py": runner,
    }
    found, report = _found(tmp_path, write_tree, files)
    assert found == []
    assert report.context["stubs"]["judged"] == 1


EXTRA = """\
    from pkg.builders import CommonBuilder


    class CBuilder(CommonBuilder):
        def __init__(self, layer_names, vllm_config):
            super().__init__(layer_names, vllm_config)
            ctx = vllm_config.compilation_config.static_forward_context
            self.window = ctx[layer_names[0]].window


    class CBackend:
        @staticmethod
        def get_builder_cls():
            return CBuilder
    """


@pytest.mark.parametrize(
    ("dims", "expected"),
    [
        ("", [("mla_runner.py", "STUB001", ("window",))]),
        ("\n            self.window = 1", []),
    ],
)
def test_a_run_time_stub_is_judged_by_each_candidate(tmp_path, write_tree, dims, expected):
    """One candidate of the family reads ``window`` besides what the family shares: what
    any candidate the stub can pick reads is required, and the message names it."""
    registry = REGISTRY.replace(
        'PLAIN = "pkg.builders.PlainBackend"',
        'PLAIN = "pkg.builders.PlainBackend"\n        C = "pkg.extra.CBackend"',
    )
    files = {
        "pkg/registry.py": registry,
        "pkg/extra.py": EXTRA,
        "benchmarks/attn/common.py": COMMON.replace(
            "{dims}", "\n            self.kv_lora_rank = 1" + dims
        ),
        "benchmarks/attn/mla_runner.py": RUNNER,
    }
    found, report = _found(tmp_path, write_tree, files)
    assert found == expected
    if expected:
        message = report.findings[0].message
        assert "(read by CBuilder.__init__;" in message
        assert "CBuilder needs it (1 of the 4 builders it serves" in message
        assert message.endswith("fine for ABuilder, BBuilder and PlainBuilder)")


SITE_RUNNER = """\
    from types import SimpleNamespace as NS

    from pkg.record import CommonAttentionMetadata
    from pkg.registry import BackendEnum


    def _backend_config(name):
        return {"builder": BackendEnum[name].value}


    def _metadata(t, n):
        return CommonAttentionMetadata(query_start_loc=t, num_reqs=n)


    def run(cfg, name, t, n, layer):
        cfg.compilation_config.static_forward_context = {"l": {layer}}
        builder = _backend_config(name)["builder"](["l"], cfg)
        return builder.build(_metadata(t, n))
    """


@pytest.mark.parametrize(
    ("layer", "passes", "expected"),
    [
        # the #40844 shape: a benchmark of the MLA family leaves out what its build asserts
        (
            "NS(prefill_backend=1, kv_lora_rank=1)",
            "",
            [("runner.py", "CAM001", ("seq_lens_cpu_upper_bound",))],
        ),
        # ... fixed: PlainBuilder needs positions, but the stub is not written for it
        ("NS(prefill_backend=1, kv_lora_rank=1)", ", seq_lens_cpu_upper_bound=t", []),
        # written for PlainBuilder only: its need is required, not the MLA family's
        ("NS(scale=1.0)", "", [("runner.py", "CAM001", ("positions",))]),
        ("NS(scale=1.0)", ", positions=t", []),
    ],
)
def test_a_run_time_site_is_judged_by_the_candidates_its_stubs_are_written_for(
    tmp_path, write_tree, layer, passes, expected
):
    runner = SITE_RUNNER.replace("{layer}", layer).replace("num_reqs=n)", f"num_reqs=n{passes})")
    found, report = _found(tmp_path, write_tree, {"benchmarks/runner.py": runner})
    assert found == expected
    if expected:
        message = report.findings[0].message
        assert "its layer stub at line 16 serves, of 3 candidates" in message
        if "positions" in expected[0][2]:
            assert "PlainBuilder needs it (1 of the 1 consumers" in message
        else:
            assert "ABuilder and BBuilder need it (2 of the 2 consumers" in message


GENERIC_RUNNER = """\
    from pkg.record import CommonAttentionMetadata
    from pkg.registry import BackendEnum


    def _metadata(t, n):
        return CommonAttentionMetadata(query_start_loc=t, num_reqs=n{passes})


    def run(cfg, name, t, n):{setup}
        builder = BackendEnum[name].value.get_builder_cls()(["l"], cfg)
        return builder.build(_metadata(t, n))
    """


@pytest.mark.parametrize(
    ("passes", "setup", "expected", "named"),
    [
        # any backend name: every candidate's need is required (the generic runner)
        (
            "",
            "",
            [("runner.py", "CAM001", ("seq_lens_cpu_upper_bound", "positions"))],
            "ABuilder, BBuilder and PlainBuilder need it (3 of the 3 consumers)",
        ),
        (
            ", positions=t",
            "",
            [("runner.py", "CAM001", ("seq_lens_cpu_upper_bound",))],
            "ABuilder and BBuilder need it (2 of the 3 consumers); fine for PlainBuilder",
        ),
        (", positions=t, seq_lens_cpu_upper_bound=t", "", [], ""),
        # decode-only batches: what the family reads on the prefill path only is not needed
        (
            "",
            "\n        cfg.speculative_config = 1",
            [("runner.py", "CAM001", ("positions",))],
            "PlainBuilder needs it (1 of the 3 consumers); fine for ABuilder and BBuilder",
        ),
        (", positions=t", "\n        cfg.speculative_config = 1", [], ""),
    ],
)
def test_a_run_time_site_is_judged_per_candidate(
    tmp_path, write_tree, passes, setup, expected, named
):
    """No stub restricts the choice: the site is a finding when any candidate needs what it
    lacks on a batch kind it builds (one candidate that does not read a field no longer
    clears it), and the message names the candidates that need it and those it is fine for."""
    runner = GENERIC_RUNNER.replace("{passes}", passes).replace("{setup}", setup)
    found, report = _found(tmp_path, write_tree, {"benchmarks/runner.py": runner})
    assert found == expected
    if expected:
        assert named in report.findings[0].message


# ----------------------------------------------------------------- transformations

CALLER = """\
    from pkg.builders import ABuilder
    from pkg.record import CommonAttentionMetadata


    class Drafter:
        def propose(self, common_attn_metadata: CommonAttentionMetadata):
            return common_attn_metadata.query_start_loc[0]


    class Runner:
        def __init__(self):
            self.builder = ABuilder([], None)
            self.drafter = Drafter()

        def _prepare(self, cam: CommonAttentionMetadata, n):
            spec_cam = cam
            if n:
                spec_cam = cam.unpadded(n)
            return cam, spec_cam

        def step(self, cam: CommonAttentionMetadata, n):
            main, spec_cam = self._prepare(cam, n)
            self.builder.build(main)
            return {handoff}
    """


@pytest.mark.parametrize(
    ("keep", "handoff", "expected"),
    [
        # the transformed record reaches the builder: what its build needs must come through
        (
            "",
            "self.builder.build(spec_cam)",
            [("record.py", "CAM001", ("seq_lens_cpu_upper_bound",))],
        ),
        (
            "\n            seq_lens_cpu_upper_bound=self.seq_lens_cpu_upper_bound,",
            "self.builder.build(spec_cam)",
            [],
        ),
        # it reaches only the drafter, which does not need the dropped field: judged by its
        # receivers, not by every builder's build (the main record goes to the builder)
        ("", "self.drafter.propose(spec_cam)", []),
        ("", None, []),  # nothing calls it
    ],
)
def test_transformation_of_the_record(tmp_path, write_tree, keep, handoff, expected):
    files = {"pkg/runner.py": CALLER.replace("{handoff}", handoff)} if handoff else {}
    found, report = _found(tmp_path, write_tree, files, keep=keep)
    assert found == expected
    if expected:
        message = report.findings[0].message
        assert "(read by CommonBuilder.build)" in message  # where ABuilder.build is defined
        assert "CommonAttentionMetadata.unpadded() is a transformation" in message
        assert "its result reaches the consumer named" in message
