"""A small SGLang-shaped tree for the audit's SGLang selftests (test_sglang.py).

Written from the shapes the audit must tell apart, not from SGLang's code, at the dotted paths
SGLang's committed facts name (``reports/engines/sglang-0.5.23.facts.json``): a
``ForwardBatch`` dataclass whose optional fields are the ones the facts measured, an
attention-backend base whose ``forward`` dispatches by the batch's mode, the three backends the
facts saw build (each constructed over a model runner, reading in ``__init__`` and
``forward_decode`` what the facts say it required of the runner and the layer, each with an
``init_forward_metadata`` builder), a ``RadixAttention``, the registry ``ATTENTION_BACKENDS``, a
``ModelRunner`` whose ``forward`` also takes the batch (a driver, not a consumer), and a test kit
like SGLang's MLA kit: a tiny model config, a mock runner storing it, a registry call and a batch
maker that fills fields after building the batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from conformance.engines.facts import EngineFacts

VERSION = "0.5.23"

RECORD = """\
    from dataclasses import dataclass
    from enum import IntEnum, auto


    class ForwardMode(IntEnum):
        EXTEND = auto()
        DECODE = auto()
        MIXED = auto()
        TARGET_VERIFY = auto()

        def is_extend(self):
            return self in (ForwardMode.EXTEND, ForwardMode.MIXED)

        def is_target_verify(self):
            return self == ForwardMode.TARGET_VERIFY


    @dataclass
    class ForwardBatch:
        forward_mode: ForwardMode
        batch_size: int
        seq_lens: object
{optional}
    """

BASE = """\
    class AttentionBackend:
        def init_forward_metadata(self, forward_batch):
            raise NotImplementedError

        def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            self.last_layer = layer.layer_id
            if forward_batch.forward_mode.is_decode():
                return self.forward_decode(q, k, v, layer, forward_batch)
            return self.forward_extend(q, k, v, layer, forward_batch)

        def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            raise NotImplementedError

        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            raise NotImplementedError
    """

LAYER = """\
    class RadixAttention:
        def __init__(self, num_heads, head_dim, layer_id):
            self.tp_q_head_num = num_heads
            self.qk_head_dim = head_dim
            self.layer_id = layer_id
    """

BACKEND = """\
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


    class {name}(AttentionBackend):
        def __init__(self, model_runner):
{init}

        def init_forward_metadata(self, forward_batch: ForwardBatch):
            self.total = forward_batch.seq_lens.sum()
            if forward_batch.forward_mode.is_target_verify():
                self.draft = forward_batch.spec_info.draft_token_num

        def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
{decode}
            return q

        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            self.heads = layer.tp_q_head_num
            if forward_batch.forward_mode.is_target_verify():
                return layer.verify_only
            return q
    """

PLAIN_BACKEND = """\
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


    class PlainAttnBackend(AttentionBackend):
        def __init__(self, model_runner):
            self.device = model_runner.device

        def init_forward_metadata(self, forward_batch: ForwardBatch):
{read}
    """

REGISTRY = """\
    ATTENTION_BACKENDS = {}


    def register_attention_backend(name):
        def decorator(fn):
            ATTENTION_BACKENDS[name] = fn
            return fn

        return decorator


    @register_attention_backend("aiter")
    def create_aiter_backend(runner):
        from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

        return AiterAttnBackend(runner)


    @register_attention_backend("triton")
    def create_triton_backend(runner):
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        return TritonAttnBackend(runner)


    @register_attention_backend("torch_native")
    def create_torch_native_backend(runner):
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

        return TorchNativeAttnBackend(runner)
    """

RUNNER = """\
    class ModelRunner:
        def forward(self, forward_batch):
            return forward_batch.split_index.start
    """

KIT = """\
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner


    class TinyModelConfig:
        def __init__(self, heads):
            self.num_attention_heads = heads
{config}


    class MockRunner(ModelRunner):
        def __init__(self, *, model_config):
            self.model_config = model_config
{runner}


    def make_batch(mode, runner):
        batch = ForwardBatch(forward_mode=mode, batch_size=1, seq_lens=[3])
        if mode.is_extend():
{later}
        return batch


    def make_decode_batch(runner):
        return ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=1, seq_lens=[3])


    def build_fixture(case):
        config = TinyModelConfig(4)
        runner = MockRunner(model_config=config)
        try:
            backend = ATTENTION_BACKENDS[case.backend](runner)
        except (AssertionError, ImportError):
            return None
        backend.init_forward_metadata(make_batch(case.forward_mode, runner))
        backend.init_forward_metadata(make_decode_batch(runner))
        return backend
    """

_PACKAGES = (
    "sglang",
    "sglang/srt",
    "sglang/srt/model_executor",
    "sglang/srt/layers",
    "sglang/srt/layers/attention",
    "sglang/test",
    "sglang/test/kits",
)
_BACKENDS = {
    "aiter": ("aiter_backend", "AiterAttnBackend"),
    "triton": ("triton_backend", "TritonAttnBackend"),
    "torch_native": ("torch_native_backend", "TorchNativeAttnBackend"),
}


def _lines(indent: int, lines: Iterable[str]) -> str:
    return "\n".join(" " * indent + line for line in lines) or " " * indent + "pass"


def required_of_runner(facts: EngineFacts) -> tuple[list[str], list[str]]:
    """(the runner attributes, the model-config attributes) the measured builders required."""
    paths = {p for b in facts.builders.values() for p in b.required}
    config = sorted(p.split(".", 1)[1] for p in paths if p.startswith("model_config."))
    runner = sorted(p for p in paths if "." not in p and p != "model_config")
    return runner, config


def facts_of(facts: EngineFacts, builder: str) -> list[str]:
    """The runner paths `builder` was measured to require."""
    return sorted(facts.builders[builder].required)


def layer_facts_of(facts: EngineFacts, builder: str) -> list[str]:
    """The layer attributes `builder`'s decode forward was measured to require."""
    return sorted(facts.provenance["layer_required"][builder])


def needed_fields(facts: EngineFacts) -> list[str]:
    """The optional record fields a measured builder needed on some batch kind."""
    return sorted(name for name, field in facts.fields.items() if field.needed_by)


def sglang_files(
    facts: EngineFacts,
    *,
    config_lacks: Iterable[str] = (),
    later_lacks: Iterable[str] = (),
    plain_read: str = "",
    aiter_init: str = "",
    aiter_decode: str = "",
) -> dict[str, str]:
    """The tree's files. Each backend's constructor reads from its runner what `facts` say it
    required (``AiterAttnBackend``'s: `aiter_init`, when given, as its ``__init__`` body), and
    its ``forward_decode`` reads from its layer what `facts` say a decode forward required
    (``AiterAttnBackend``'s: `aiter_decode`, when given). The
    kit's model config and runner carry every attribute `facts` say a builder required, but
    `config_lacks`; its batch maker fills every needed field after building the batch, but
    `later_lacks`. With `plain_read`, a ``PlainAttnBackend`` whose ``init_forward_metadata``
    body is those lines, and a test that names it."""
    runner_attrs, config_attrs = required_of_runner(facts)
    skip = set(config_lacks)
    config = [f"self.{a} = None" for a in config_attrs if a not in skip]
    runner = [f"self.{a} = None" for a in runner_attrs]
    later = [f"batch.{f} = [1]" for f in needed_fields(facts) if f not in set(later_lacks)]
    optional = sorted({*facts.fields, "spec_info", "positions", "split_index"})
    files = {f"{package}/__init__.py": "" for package in _PACKAGES}
    files["sglang/_version.py"] = f"__version__ = version = '{VERSION}'\n"
    files["sglang/srt/model_executor/forward_batch_info.py"] = RECORD.replace(
        "{optional}", _lines(8, (f"{name}: object = None" for name in optional))
    )
    files["sglang/srt/model_executor/model_runner.py"] = RUNNER
    files["sglang/srt/layers/attention/base_attn_backend.py"] = BASE
    files["sglang/srt/layers/attention/attention_registry.py"] = REGISTRY
    for builder, (module, name) in _BACKENDS.items():
        reads = [f"self.r{n} = model_runner.{p}" for n, p in enumerate(facts_of(facts, builder))]
        init = aiter_init.splitlines() if aiter_init and builder == "aiter" else reads
        layer = [f"self.l{n} = layer.{a}" for n, a in enumerate(layer_facts_of(facts, builder))]
        decode = aiter_decode.splitlines() if aiter_decode and builder == "aiter" else layer
        files[f"sglang/srt/layers/attention/{module}.py"] = (
            BACKEND.replace("{name}", name)
            .replace("{init}", _lines(12, init))
            .replace("{decode}", _lines(12, decode))
        )
    files["sglang/srt/layers/radix_attention.py"] = LAYER
    files["sglang/test/kits/mla_kit.py"] = (
        KIT.replace("{config}", _lines(12, config))
        .replace("{runner}", _lines(12, runner))
        .replace("{later}", _lines(12, later))
    )
    if plain_read:
        files["sglang/srt/layers/attention/plain_backend.py"] = PLAIN_BACKEND.replace(
            "{read}", _lines(12, plain_read.splitlines())
        )
        files["sglang/test/test_plain.py"] = PLAIN_TEST
    return files


PLAIN_TEST = """\
    from sglang.srt.layers.attention.plain_backend import PlainAttnBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


    def test_plain(runner):
        backend = PlainAttnBackend(runner)
        batch = ForwardBatch(forward_mode=ForwardMode.EXTEND, batch_size=1, seq_lens=[3])
        backend.init_forward_metadata(batch)
    """
