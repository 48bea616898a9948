"""A small engine-shaped package for the audit's mechanism fixtures (test_mechanisms.py).

Written from the shapes the audit must tell apart, not from any engine's code: a record with
optional fields and a transformation, a family of builders sharing one base whose
constructor reads layer dims from the first layer and whose ``build`` needs an optional
field on the prefill path only, a builder of another family, backends returning their
builders, a registry enum naming the backends, and a config class whose parser returns the
enum (naming it must not reach any builder).
"""

from __future__ import annotations

RECORD = """\
    from dataclasses import dataclass


    @dataclass
    class CommonAttentionMetadata:
        query_start_loc: object
        num_reqs: int
        seq_lens_cpu_upper_bound: object = None
        positions: object = None
        dcp_lens: object = None
        encoder_lens: object = None
        mm_ranges: object = None

        def unpadded(self, num_reqs):
            return CommonAttentionMetadata(
                query_start_loc=self.query_start_loc[: num_reqs + 1],
                num_reqs=num_reqs,
                positions=self.positions,{keep}
            )
    """

LAYERS = """\
    class AttentionLayerBase:
        pass
    """

BUILDERS = """\
    from pkg.record import CommonAttentionMetadata


    def split(cam):
        return cam.num_reqs


    class CommonBuilder:
        def __init__(self, layer_names, vllm_config):
            ctx = vllm_config.compilation_config.static_forward_context
            layer = ctx[layer_names[0]]
            self.rank = layer.kv_lora_rank
            self.backend = layer.prefill_backend
            self.flag = any(getattr(ctx[name], "flag", False) for name in layer_names)
            if self.use_dcp:
                self.manager = layer.dcp_manager

        def build(self, common_attn_metadata: CommonAttentionMetadata):
            cam = common_attn_metadata
            num_prefills = split(cam)
            if num_prefills > 0:
                bound = cam.seq_lens_cpu_upper_bound
                assert bound is not None
            positions = cam.positions
            if positions is None:
                positions = cam.query_start_loc
            first = positions[0]
            if self.compress_ratio == 128:
                first = cam.dcp_lens[0]
            extra = [cam.encoder_lens[i] for i in self.groups]
            if cam.mm_ranges is not None and self.enabled:
                assert cam.seq_lens_cpu_upper_bound is not None
            return first, extra, cam.query_start_loc[0]

        @staticmethod
        def count(common_attn_metadata):
            return common_attn_metadata.num_reqs + 1


    class ABuilder(CommonBuilder):
        pass


    class BBuilder(CommonBuilder):
        pass


    class PlainBuilder:
        def __init__(self, layer_names, vllm_config):
            ctx = vllm_config.compilation_config.static_forward_context
            self.scale = ctx[layer_names[0]].scale

        def build(self, common_attn_metadata):
            return common_attn_metadata.positions[0]


    class ABackend:
        @staticmethod
        def get_builder_cls():
            return ABuilder


    class BBackend:
        @staticmethod
        def get_builder_cls():
            return BBuilder


    class PlainBackend:
        @staticmethod
        def get_builder_cls():
            return PlainBuilder
    """

REGISTRY = """\
    import enum


    class BackendEnum(enum.Enum):
        A = "pkg.builders.ABackend"
        B = "pkg.builders.BBackend"
        PLAIN = "pkg.builders.PlainBackend"


    class SpecConfig:
        def _parse_backend(self):
            return BackendEnum
    """


def engine_files(keep: str = "") -> dict[str, str]:
    """The package; `keep` adds keywords to the record's ``unpadded()`` rebuild."""
    return {
        "pkg/__init__.py": "",
        "pkg/record.py": RECORD.replace("{keep}", keep),
        "pkg/layers.py": LAYERS,
        "pkg/builders.py": BUILDERS,
        "pkg/registry.py": REGISTRY,
    }
