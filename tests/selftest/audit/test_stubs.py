"""Stub audit: each STUB rule fires on a broken stub and not on its fixed twin."""

from __future__ import annotations

import pytest

from conformance.audit import LayerProtocol, Options, ProtocolFileError, run_audit
from conformance.audit.protocol import parse_protocol_text

BUILDER = """\
    from abc import ABC


    class AttentionLayerBase(ABC):
        pass


    class Builder:
        def __init__(self, layer_names, vllm_config):
            layer = vllm_config.compilation_config.static_forward_context[layer_names[0]]
            self.rank = layer.kv_lora_rank
            self.backend = layer.prefill_backend.clone()


    class TypedBuilder:
        def __init__(self, layer_names, vllm_config):
            from pkg.utils import get_layers_from_vllm_config

            layers = get_layers_from_vllm_config(vllm_config, AttentionLayerBase, layer_names)
            for name, layer in layers.items():
                self.heads = layer.num_heads
    """


def _stubs(tmp_path, write_tree, test: str, protocol=None) -> list[tuple[str, tuple]]:
    root = write_tree(tmp_path, {"pkg/builder.py": BUILDER, "tests/test_x.py": test})
    report = run_audit([root], audits=("stubs",), protocol=protocol, options=Options(jobs=1))
    return sorted((f.code, f.names) for f in report.findings if f.code != "STUB003")


def _test(stub: str, builder: str = "Builder", prelude: str = "") -> str:
    return f"""\
        from types import SimpleNamespace
        from pkg.builder import {builder}, AttentionLayerBase
        {prelude}

        def test_it(cfg, pb, extra):
            cfg.compilation_config.static_forward_context["l"] = {stub}
            {builder}(["l"], cfg)
        """


@pytest.mark.parametrize(
    ("stub", "expected"),
    [
        ("SimpleNamespace(kv_lora_rank=1, prefill_backend=pb)", []),
        ("SimpleNamespace(prefill_backend=pb)", [("STUB001", ("kv_lora_rank",))]),
        ("{'kv_lora_rank': 1}", [("STUB001", ("prefill_backend",))]),
        ("dict(kv_lora_rank=1, prefill_backend=SimpleNamespace(clone=None))", []),
        (
            "dict(kv_lora_rank=1, prefill_backend=SimpleNamespace(x=1))",
            [("STUB001", ("prefill_backend.clone",))],
        ),
        ("SimpleNamespace(prefill_backend=pb, **extra)", [("STUB002", ("kv_lora_rank",))]),
        ("SimpleNamespace(kv_lora_rank=1, prefill_backend=pb, **extra)", []),
    ],
)
def test_each_rule_and_its_control(tmp_path, write_tree, stub, expected):
    assert _stubs(tmp_path, write_tree, _test(stub)) == expected


AD_HOC = """
class Fake(AttentionLayerBase):
    kv_lora_rank = 1

    def __init__(self, pb):
        self.prefill_backend = pb


class Half:
    def __init__(self):
        self.kv_lora_rank = 1
"""


@pytest.mark.parametrize(
    ("stub", "expected"),
    [
        ("Fake(pb)", []),
        ("Half()", [("STUB001", ("prefill_backend",))]),
        ("object.__new__(Fake)", [("STUB001", ("prefill_backend",))]),
    ],
)
def test_ad_hoc_classes_and_standins(tmp_path, write_tree, stub, expected):
    test = _test(stub).replace(
        "\n\n        def test_it", AD_HOC.replace("\n", "\n        ") + "\n\n        def test_it"
    )
    assert _stubs(tmp_path, write_tree, test) == expected


def test_a_stub_reaching_no_builder_is_not_judged(tmp_path, write_tree):
    test = _test("SimpleNamespace()").replace('Builder(["l"], cfg)', "pass")
    test = test.replace("from pkg.builder import Builder, AttentionLayerBase", "")
    assert _stubs(tmp_path, write_tree, test) == []


def test_typed_lookups_only_bind_subclasses(tmp_path, write_tree):
    assert _stubs(tmp_path, write_tree, _test("SimpleNamespace()", "TypedBuilder")) == []
    test = _test("Fake(pb)", "TypedBuilder").replace(
        "\n\n        def test_it", AD_HOC.replace("\n", "\n        ") + "\n\n        def test_it"
    )
    assert _stubs(tmp_path, write_tree, test) == [("STUB001", ("num_heads",))]


def test_stub003_flags_non_layer_stubs_only(tmp_path, write_tree):
    root = write_tree(
        tmp_path,
        {
            "pkg/builder.py": BUILDER,
            "tests/test_x.py": _test("SimpleNamespace(kv_lora_rank=1, prefill_backend=pb)"),
        },
    )
    codes = [f.code for f in run_audit([root], options=Options(jobs=1)).findings]
    assert codes == ["STUB003"]
    test = _test("Fake(pb)").replace(
        "\n\n        def test_it", AD_HOC.replace("\n", "\n        ") + "\n\n        def test_it"
    )
    root = write_tree(tmp_path / "b", {"pkg/builder.py": BUILDER, "tests/test_x.py": test})
    assert [f.code for f in run_audit([root], options=Options(jobs=1)).findings] == []


def test_guarded_and_defaulted_reads_are_not_requirements(tmp_path, write_tree):
    guarded = BUILDER.replace(
        "self.rank = layer.kv_lora_rank",
        "if hasattr(layer, 'kv_lora_rank'):\n"
        "                self.rank = layer.kv_lora_rank\n"
        "            self.x = getattr(layer, 'x', None)",
    )
    root = write_tree(
        tmp_path,
        {
            "pkg/builder.py": guarded,
            "tests/test_x.py": _test("SimpleNamespace(prefill_backend=pb)"),
        },
    )
    report = run_audit([root], audits=("stubs",), options=Options(jobs=1))
    assert [f.code for f in report.findings] == ["STUB003"]


def test_protocol_overrides_the_tree_and_judges_every_stub(tmp_path, write_tree):
    protocol = LayerProtocol({"x": frozenset({"q_lora_rank"})}, source="test")
    unreached = _test("SimpleNamespace()").replace('Builder(["l"], cfg)', "pass")
    assert _stubs(tmp_path, write_tree, unreached, protocol) == [("STUB001", ("q_lora_rank",))]


def test_standin_rule_and_controls(tmp_path, write_tree):
    impl = """\
        class Impl:
            def __init__(self):
                self.dtype = "fp8"
                self.heads = 2

            def forward(self):
                return self.dtype, self._more()

            def _more(self):
                return self.heads
        """
    test = """\
        from pkg.impl import Impl


        def test_missing():
            impl = object.__new__(Impl)
            impl.heads = 1
            return impl.forward()


        def test_complete():
            impl = object.__new__(Impl)
            impl.heads, impl.dtype = 1, "x"
            return impl.forward()


        def test_initialised():
            impl = object.__new__(Impl)
            Impl.__init__(impl)
            return impl.forward()


        def test_unused():
            return object.__new__(Impl)
        """
    root = write_tree(tmp_path, {"pkg/impl.py": impl, "tests/test_impl.py": test})
    report = run_audit([root], options=Options(jobs=1))
    assert [(f.code, f.names, f.qualname) for f in report.findings] == [
        ("STUB004", ("dtype",), "test_missing")
    ]


def test_protocol_file_errors_name_file_and_line():
    with pytest.raises(ProtocolFileError, match=r"p.txt:2: bad attribute path"):
        parse_protocol_text("a\nq lora\n", "p.txt")
    assert parse_protocol_text("[a]\nx\n[b]\ny.z\n", "p").attributes == {"x", "y.z"}


def _standin_names(tmp_path, write_tree, module: str, source: str, test: str) -> list[tuple]:
    """The names of each STUB004 finding of `test` (written as is, not dedented) over the
    class module ``pkg/<module>.py``."""
    root = write_tree(tmp_path, {f"pkg/{module}.py": source})
    (root / "tests").mkdir()
    (root / "tests" / f"test_{module}.py").write_text(test)
    report = run_audit([root], options=Options(jobs=1))
    return [f.names for f in report.findings if f.code == "STUB004"]


STANDIN_IMPL = """\
    class Impl:
        def __init__(self):
            self.dtype = "fp8"
            self.heads = 2
            self.cache = {}

        def forward(self):
            kind = self.dtype
            if self.heads > 4:
                return self.rare
            return kind

        def early(self):
            if self.heads:
                return 0
            return self.dtype

        def fill(self):
            self.cache = {1: 2}

        def reset(self):
            self.metrics_list = []

        def total(self):
            return self._count(self.heads)

        @staticmethod
        def _count(batch):
            return batch.metrics_list
    """


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("impl.heads = 1\n    impl.forward()", [("dtype",)]),  # the rule fires
        ("impl.heads = 1\n    impl.forward = lambda: 0\n    impl.forward()", []),  # mocked
        (
            "impl.heads = 1\n    with pytest.raises(AttributeError):\n        impl.forward()",
            [],
        ),  # expected to fail
        ("impl.heads = 1\n    impl.early()", []),  # dtype read after an early return only
        ("impl.dtype = 'x'\n    impl.forward()", [("heads",)]),  # 'rare' is on one branch
        ("impl.fill()\n    assert impl.cache", []),  # read after a call that sets it
        ("object.__setattr__(impl, 'heads', 1)\n    impl.forward()", [("dtype",)]),
        ("impl.heads = 1\n    impl.total()", []),  # a static method's parameter is not self
    ],
)
def test_standin_reads_on_every_path_only(tmp_path, write_tree, body, expected):
    head = "import pytest\nfrom pkg.impl import Impl\n\n\n"
    test = f"{head}def test_it():\n    impl = object.__new__(Impl)\n    {body}\n"
    assert _standin_names(tmp_path, write_tree, "impl", STANDIN_IMPL, test) == expected


REPLACED_IMPL = """\
    class Stage:
        def __init__(self, server_args):
            self.cache = None
            self.server_args = server_args

        def prepare(self):
            self._init_cache()
            return self.cache

        def _init_cache(self):
            self.cache = [self.server_args]

        def run(self):
            self.load()
            return 1

        def load(self):
            return self.server_args
    """


@pytest.mark.parametrize(
    ("head", "body", "expected"),
    [
        ("", "stage.run()", [("server_args",)]),  # load reads it
        ("", "with patch.object(stage, 'load'):\n        stage.run()", []),
        ("", "with mock.patch.object(stage, 'load', return_value=0):\n        stage.run()", []),
        ("", "patch.object(stage, 'load').start()\n    stage.run()", []),
        ("", "with patch.object(Stage, 'load'):\n        stage.run()", []),
        ("", "with mock.patch.object(Stage, 'load', return_value=0):\n        stage.run()", []),
        ("@patch.object(Stage, 'load')\n", "stage.run()", []),  # a decorator
        ("", "stage.prepare()", [("server_args",)]),  # _init_cache sets cache, reads server_args
        (
            "",
            "def fake(self):\n        self.cache = [1]\n\n"
            "    stage._init_cache = types.MethodType(fake, stage)\n    stage.prepare()",
            [],
        ),  # the replacement runs and sets what prepare reads
        (
            "",
            "def fake(self):\n        return None\n\n"
            "    stage._init_cache = MethodType(fake, stage)\n    stage.prepare()",
            [("cache",)],
        ),  # the replacement sets nothing: prepare's read of cache fails
    ],
)
def test_standin_methods_replaced_by_patches(tmp_path, write_tree, head, body, expected):
    imports = (
        "import types\nfrom types import MethodType\nfrom unittest import mock\n"
        "from unittest.mock import patch\n\nfrom pkg.stage import Stage\n\n\n"
    )
    test = f"{imports}{head}def test_it(*mocks):\n    stage = object.__new__(Stage)\n    {body}\n"
    assert _standin_names(tmp_path, write_tree, "stage", REPLACED_IMPL, test) == expected


def test_standin_class_patches_in_a_test_class_and_its_decorators(tmp_path, write_tree):
    test = """\
        from unittest import mock

        from pkg.stage import Stage


        class TestStage:
            @mock.patch.object(Stage, "load")
            def test_patched(self, load):
                stage = object.__new__(Stage)
                stage.run()

            def test_unpatched(self):
                stage = object.__new__(Stage)
                stage.run()
        """
    root = write_tree(tmp_path, {"pkg/stage.py": REPLACED_IMPL, "tests/test_stage.py": test})
    report = run_audit([root], options=Options(jobs=1))
    found = [(f.qualname, f.names) for f in report.findings if f.code == "STUB004"]
    assert found == [("TestStage.test_unpatched", ("server_args",))], report.to_text()
