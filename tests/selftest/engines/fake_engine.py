"""A small fake engine with vLLM's shapes, for the engine checks' negative controls.

`FakeAttentionMetadata` is a dataclass with vLLM's required fields and a few optional
ones; `MLABuilder` reads the five MLA dims and ``prefill_backend.clone()`` from its first
layer and asserts ``seq_lens_cpu_upper_bound`` on batches with prefill rows (#40654), and its
decode plan calls a planner with the run's dtypes. Each ``broken_*`` switch makes one known
regression so a selftest can prove the matching check fails on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.metadata.record import REQUIRED_FIELDS, CommonAttentionMetadata

DIMS = {
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}


OPTIONAL_FIELDS = ("causal", "positions", "is_prefilling", "seq_lens_cpu_upper_bound")
_RECORD_FIELDS = {f.name: f for f in dataclasses.fields(CommonAttentionMetadata)}


def _record_field(name: str) -> tuple[str, Any] | tuple[str, Any, Any]:
    """The suite record's field `name`, with its type and default."""
    made = _RECORD_FIELDS[name]
    if made.default is dataclasses.MISSING:
        return name, made.type
    return name, made.type, field(default=made.default)


def _unpadded(self: Any, num_actual_tokens: int, num_actual_reqs: int) -> Any:
    """vLLM's ``unpadded``; with ``broken_unpadded`` it drops the upper bound."""
    bound = self.seq_lens_cpu_upper_bound
    return dataclasses.replace(
        self,
        query_start_loc=self.query_start_loc[: num_actual_reqs + 1],
        query_start_loc_cpu=self.query_start_loc_cpu[: num_actual_reqs + 1],
        seq_lens=self.seq_lens[:num_actual_reqs],
        num_reqs=num_actual_reqs,
        num_actual_tokens=num_actual_tokens,
        block_table_tensor=self.block_table_tensor[:num_actual_reqs],
        slot_mapping=self.slot_mapping[:num_actual_tokens],
        seq_lens_cpu_upper_bound=None if self.broken_unpadded else bound,
    )


# vLLM's record: the suite's required fields and a few optional ones, same types and defaults.
FakeAttentionMetadata = dataclasses.make_dataclass(
    "FakeAttentionMetadata",
    [
        *(_record_field(name) for name in (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)),
        ("broken_unpadded", bool, field(default=False, repr=False)),
    ],
    namespace={"unpadded": _unpadded},
)


@dataclass
class FakeAttentionMetadataWithNewField:
    """A newer record with a required field the suite's batch factory does not produce."""

    query_start_loc: torch.Tensor
    dspark_window: torch.Tensor
    seq_lens_cpu_upper_bound: torch.Tensor | None = None


class PrefillBackend:
    def clone(self) -> PrefillBackend:
        return PrefillBackend()


class Layer:
    """A layer with what the fake builder reads, less `omit`."""

    def __init__(self, omit: tuple[str, ...] = ()) -> None:
        for name, value in {**DIMS, "prefill_backend": PrefillBackend()}.items():
            if name not in omit:
                setattr(self, name, value)


@dataclass
class Planner:
    """Records the planner calls a builder makes."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, **arguments: Any) -> None:
        self.calls.append(arguments)


class MLABuilder:
    """The fake MLA metadata builder."""

    def __init__(
        self,
        layers: Mapping[str, Any],
        *,
        planner: Planner | None = None,
        kv_dtype: torch.dtype = torch.float8_e4m3fnuz,
        broken_planner_dtypes: bool = False,
        broken_reads_every_layer: bool = False,
    ) -> None:
        names = list(layers)
        first = layers[names[0]]
        self.dims = {name: getattr(first, name) for name in DIMS}
        self.prefill_backend = first.prefill_backend.clone()
        self.non_causal = any(getattr(layers[n], "non_causal", False) for n in names)
        if broken_reads_every_layer:
            for name in names[1:]:
                _ = layers[name].kv_lora_rank
        self.planner = planner or Planner()
        self.kv_dtype = kv_dtype
        self.broken_planner_dtypes = broken_planner_dtypes

    def build(self, common_prefix_len: int, cam: FakeAttentionMetadata) -> dict[str, Any]:
        query_lens = cam.query_start_loc_cpu[1:] - cam.query_start_loc_cpu[:-1]
        if bool((query_lens > 1).any()):
            assert cam.seq_lens_cpu_upper_bound is not None
        dtypes = {} if self.broken_planner_dtypes else {"dtype_q": self.kv_dtype}
        dtypes |= {} if self.broken_planner_dtypes else {"dtype_kv": self.kv_dtype}
        self.planner(page_size=1, kv_granularity=16, fast_mode=True, **dtypes)
        return {"num_reqs": cam.num_reqs}
