"""Self-tests of the static stub audit (`conformance.audit.stubs`) and protocol loading.

The #52139 test stub (a `SimpleNamespace` with only `prefill_backend`) must be reported with
its five missing MLA dims; the fixed stub and a complete layer class must not.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conformance.audit.findings import Finding
from conformance.audit.protocol import (
    LayerProtocol,
    ProtocolFileError,
    default_protocol,
    parse_protocol_text,
)
from conformance.audit.stubs import audit_stubs
from conformance.audit.tree import load_tree
from conformance.metadata.dims import MLA_DIM_NAMES
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

PROTOCOL = LayerProtocol({"mla": MLA_BUILDER_LAYER_PROTOCOL}, source="test")

STUB_52139 = """\
import types

import torch


def _build_decode_metadata():
    vllm_config = create_vllm_config(model_name="deepseek-ai/DeepSeek-R1")
    layer_name = "placeholder"
    vllm_config.compilation_config.static_forward_context[layer_name] = (
        types.SimpleNamespace(prefill_backend=torch.empty((1,)))
    )
    return vllm_config
"""

STUB_52139_FIXED = """\
import types

import torch


def _build_decode_metadata():
    vllm_config = create_vllm_config(model_name="deepseek-ai/DeepSeek-R1")
    mla_dims = get_mla_dims(vllm_config.model_config)
    vllm_config.compilation_config.static_forward_context["placeholder"] = (
        types.SimpleNamespace(
            prefill_backend=torch.empty((1,)),
            q_lora_rank=mla_dims.q_lora_rank,
            kv_lora_rank=mla_dims.kv_lora_rank,
            qk_nope_head_dim=mla_dims.qk_nope_head_dim,
            qk_rope_head_dim=mla_dims.qk_rope_head_dim,
            v_head_dim=mla_dims.v_head_dim,
        )
    )
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path → source) under `root`; return `root`."""
    for relpath, source in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


def stub_findings(
    root: Path, protocol: LayerProtocol = PROTOCOL, *, warnings: bool = False
) -> list[Finding]:
    """Findings of the stub audit over `root` (warnings left out unless asked), by line."""
    findings = audit_stubs(load_tree([root]), protocol)
    return sorted(
        (f for f in findings if warnings or f.kind != "warning"),
        key=lambda f: (f.path, f.line, f.code),
    )


# ---------------------------------------------------------------------------- #52139


def test_52139_stub_is_reported_with_its_five_missing_dims(tmp_path):
    relpath = "tests/kernels/attention/test_rocm_aiter_mla_decode_metadata.py"
    write_tree(tmp_path, {relpath: STUB_52139})
    (finding,) = stub_findings(tmp_path)
    assert (finding.code, finding.kind) == ("STUB001", "missing")
    assert finding.path == str(tmp_path / relpath)
    assert finding.line == 10
    assert finding.qualname == "_build_decode_metadata"
    assert set(finding.names) == set(MLA_DIM_NAMES)
    for name in MLA_DIM_NAMES:
        assert name in finding.message
    assert "static_forward_context at line 9" in finding.message


def test_52139_fixed_stub_has_no_missing_attributes_but_a_layer_base_warning(tmp_path):
    write_tree(tmp_path, {"test_decode.py": STUB_52139_FIXED})
    findings = stub_findings(tmp_path, warnings=True)
    assert [(f.code, f.kind, f.names) for f in findings] == [
        ("STUB003", "warning", ("AttentionLayerBase",))
    ]


# ---------------------------------------------------------------------------- classes

LAYER_CLASSES = """\
from vllm.model_executor.layers.attention import AttentionLayerBase, MLAAttention


class PrefillBackendStub:
    def clone(self):
        return PrefillBackendStub()


class DimsMixin:
    q_lora_rank = None

    @property
    def v_head_dim(self):
        return 128


class CompleteLayer(DimsMixin, AttentionLayerBase):
    kv_lora_rank: int = 512

    def __init__(self):
        self.prefill_backend = PrefillBackendStub()
        self.qk_nope_head_dim = 128
        setattr(self, "qk_rope_head_dim", 64)


class IncompleteLayer(AttentionLayerBase):
    def __init__(self):
        self.prefill_backend = PrefillBackendStub()


class RealLayerSubclass(MLAAttention):
    pass


class DynamicLayer(AttentionLayerBase):
    def __getattr__(self, name):
        return 0


def register(config):
    config.static_forward_context["complete"] = CompleteLayer()
    config.static_forward_context["incomplete"] = IncompleteLayer()
    config.static_forward_context["real"] = RealLayerSubclass()
    config.static_forward_context["dynamic"] = DynamicLayer()
    config.static_forward_context["factory"] = make_layer()
"""


def test_ad_hoc_classes_use_their_attributes_and_in_tree_bases(tmp_path):
    write_tree(tmp_path, {"layers_test.py": LAYER_CLASSES})
    findings = stub_findings(tmp_path, warnings=True)
    # Only the incomplete class is reported; the complete one (class attributes, a
    # property from an in-tree mixin, self.x, setattr) is clean, the out-of-tree base and
    # __getattr__ ones are trusted, the factory call is not audited, and all are layers.
    assert [(f.code, f.line) for f in findings] == [("STUB001", 42)]
    assert set(findings[0].names) == set(MLA_DIM_NAMES)
    assert "IncompleteLayer(...)" in findings[0].message


def test_library_classes_are_not_stubs_but_test_helper_classes_are(tmp_path):
    write_tree(
        tmp_path,
        {
            "vllm/attention/layer.py": """\
                class Attention(AttentionLayerBase):
                    def __init__(self, num_heads):
                        self.num_heads = num_heads
                """,
            "tests/helpers/layers.py": """\
                class HelperLayer(AttentionLayerBase):
                    prefill_backend = None
                """,
            "tests/test_layers.py": """\
                from tests.helpers.layers import HelperLayer
                from vllm.attention.layer import Attention

                def register(config):
                    config.static_forward_context["real"] = Attention(8)
                    config.static_forward_context["helper"] = HelperLayer()
                """,
        },
    )
    (finding,) = stub_findings(tmp_path, warnings=True)
    assert (finding.code, finding.line) == ("STUB001", 6)
    assert finding.path.endswith("tests/test_layers.py")
    assert "HelperLayer(...)" in finding.message


def test_class_that_is_not_a_layer_gets_the_warning(tmp_path):
    write_tree(
        tmp_path,
        {
            "plain.py": """\
                class PlainLayer:
                    prefill_backend = q_lora_rank = kv_lora_rank = None
                    qk_nope_head_dim = qk_rope_head_dim = v_head_dim = None

                def register(ctx_owner):
                    ctx_owner.static_forward_context["x"] = PlainLayer()
                """
        },
    )
    findings = stub_findings(tmp_path, warnings=True)
    assert [(f.code, f.kind) for f in findings] == [("STUB003", "warning")]


# ---------------------------------------------------------------------------- store shapes

STORE_SHAPES = """\
from types import SimpleNamespace as NS


def through_a_variable(config, pb):
    layer = NS(prefill_backend=pb, q_lora_rank=1)
    layer.kv_lora_rank = 512
    setattr(layer, "qk_nope_head_dim", 128)
    ctx = config.compilation_config.static_forward_context
    ctx["a"] = layer


def dict_literal(config):
    config.compilation_config.static_forward_context = {"b": {"prefill_backend": 1}}


def update_call(config):
    config.static_forward_context.update({"c": NS(prefill_backend=1)})


def assigned_mapping(config):
    forward = {"d": NS(prefill_backend=1)}
    config.static_forward_context = forward


def keyword_argument():
    return CompilationConfig(static_forward_context={"e": NS(prefill_backend=1)})


def not_a_context(other):
    other["f"] = NS()
"""


def test_every_store_shape_is_found(tmp_path):
    write_tree(tmp_path, {"shapes.py": STORE_SHAPES})
    findings = stub_findings(tmp_path)
    assert [(f.qualname, f.line) for f in findings] == [
        ("through_a_variable", 5),
        ("dict_literal", 13),
        ("update_call", 17),
        ("assigned_mapping", 21),
        ("keyword_argument", 26),
    ]
    first = findings[0]
    assert set(first.names) == {"qk_rope_head_dim", "v_head_dim"}
    assert "at line 9" in first.message
    dims = set(MLA_DIM_NAMES)
    assert all(set(f.names) == dims for f in findings[1:])


def test_nested_stub_missing_a_dotted_attribute(tmp_path):
    write_tree(
        tmp_path,
        {
            "nested.py": """\
                from types import SimpleNamespace

                def register(config):
                    config.static_forward_context["x"] = SimpleNamespace(
                        prefill_backend=SimpleNamespace(prepare_metadata=None),
                        q_lora_rank=1, kv_lora_rank=2, qk_nope_head_dim=3,
                        qk_rope_head_dim=4, v_head_dim=5,
                    )
                """
        },
    )
    (finding,) = stub_findings(tmp_path)
    assert finding.names == ("prefill_backend.clone",)


def test_unpacked_namespace_is_unverifiable_unless_complete(tmp_path):
    write_tree(
        tmp_path,
        {
            "unpacked.py": """\
                from types import SimpleNamespace

                def opaque(config, dims):
                    config.static_forward_context["x"] = SimpleNamespace(**dims)

                def complete(config, extra):
                    config.static_forward_context["y"] = SimpleNamespace(
                        prefill_backend=1, q_lora_rank=1, kv_lora_rank=2, qk_nope_head_dim=3,
                        qk_rope_head_dim=4, v_head_dim=5, **extra,
                    )

                def literal(config):
                    config.static_forward_context["z"] = dict(**{"prefill_backend": 1})
                """
        },
    )
    findings = stub_findings(tmp_path)
    assert [(f.qualname, f.code, f.kind) for f in findings] == [
        ("opaque", "STUB002", "unverifiable"),
        ("literal", "STUB001", "missing"),
    ]
    assert "cannot verify" in findings[0].message


# ---------------------------------------------------------------------------- stand-ins

STANDIN_51011 = """\
class AiterMLAImpl:
    supports_fp8 = True

    def __init__(self, kv_cache_dtype):
        self.kv_cache_dtype = kv_cache_dtype
        self.num_heads = 16


def test_fp8_predicate():
    impl = object.__new__(AiterMLAImpl)
    impl.num_heads = 16
    assert impl.supports_fp8


def test_complete_standin():
    impl = object.__new__(AiterMLAImpl)
    impl.num_heads = 16
    impl.kv_cache_dtype = "fp8"


class Singleton:
    def __new__(cls):
        return object.__new__(cls)


class GatewayRunner:
    def __init__(self):
        self.sessions = {}


def test_unrelated_classes():
    runner = object.__new__(GatewayRunner)
    scheduler = object.__new__(Scheduler)


def test_imported_impl():
    impl = object.__new__(TritonMLAImpl)
    impl.num_heads = 8
    impl.supports_fp8 = False


def test_initialised_afterwards():
    impl = object.__new__(AiterMLAImpl)
    AiterMLAImpl.__init__(impl, "fp8")
"""


def test_object_new_standin_missing_an_attribute_is_reported(tmp_path):
    write_tree(tmp_path, {"test_aiter_mla.py": STANDIN_51011})
    protocol = parse_protocol_text("num_heads\nkv_cache_dtype\nsupports_fp8\n", "impl.txt")
    findings = stub_findings(tmp_path, protocol, warnings=True)
    # Unrelated classes (in the tree without protocol attributes, or outside it with an
    # unrelated name), cls in __new__ and stand-ins initialised afterwards are left alone.
    imported_line = STANDIN_51011.splitlines().index("    impl = object.__new__(TritonMLAImpl)")
    assert [(f.code, f.kind, f.qualname, f.line, f.names) for f in findings] == [
        ("STUB004", "missing", "test_fp8_predicate", 10, ("kv_cache_dtype",)),
        ("STUB004", "missing", "test_imported_impl", imported_line + 1, ("kv_cache_dtype",)),
    ]
    assert "__init__ never runs" in findings[0].message


def test_suppression_comment_silences_a_stub(tmp_path):
    source = STUB_52139.replace(
        "static_forward_context[layer_name] = (",
        "static_forward_context[layer_name] = (  # conformance-audit: ignore[STUB001]",
    )
    write_tree(tmp_path, {"test_decode.py": source})
    assert [f.code for f in stub_findings(tmp_path, warnings=True)] == ["STUB003"]


# ---------------------------------------------------------------------------- protocols


def test_protocol_file_sections_are_united():
    protocol = parse_protocol_text(
        "# comment\nprefill_backend   # trailing\n\n[rocm]\nq_lora_rank\n[cuda]\nimpl.num_heads\n",
        "p.txt",
    )
    assert protocol.by_backend == {
        "default": frozenset({"prefill_backend"}),
        "rocm": frozenset({"q_lora_rank"}),
        "cuda": frozenset({"impl.num_heads"}),
    }
    assert protocol.attributes == {"prefill_backend", "q_lora_rank", "impl.num_heads"}
    assert protocol.requirement_tree()["impl"] == {"num_heads": {}}


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("prefill_backend\nq lora rank\n", 2, "bad attribute path 'q lora rank'"),
        ("[rocm\nx\n", 1, "bad section header"),
        ("[a]\nx\n[a]\ny\n", 3, "appears twice (first at line 1)"),
        ("[a]\n[b]\nx\n", 1, "section [a] lists no attributes"),
        ("# nothing\n", 0, "defines no attributes"),
        ("class.x\n", 1, "bad attribute path"),
    ],
)
def test_bad_protocol_file_names_file_and_line(text, line, fragment):
    with pytest.raises(ProtocolFileError) as exc:
        parse_protocol_text(text, "proto.txt")
    assert exc.value.line == line
    assert exc.value.path == "proto.txt"
    assert fragment in str(exc.value)
    assert str(exc.value).startswith(f"proto.txt:{line}: " if line else "proto.txt: ")


def test_default_protocol_is_the_union_of_the_registered_backends():
    registry = pytest.importorskip("backends.registry")
    declared = registry.layer_protocols()
    protocol = default_protocol()
    assert protocol.source == "backends.registry.layer_protocols()"
    assert protocol.attributes == frozenset().union(*declared.values())
    assert MLA_BUILDER_LAYER_PROTOCOL <= protocol.attributes
