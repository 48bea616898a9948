"""vLLM #52139 replayed: a `SimpleNamespace` layer stub lacking `q_lora_rank`.

The dynamic check, the recorded builder run and the static audit must each name the
missing attribute, the stub's file and line; the fixed stub is still flagged for its
accidental tensor `prefill_backend`.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from backends.base import BuilderConfig, KVCacheSpec
from backends.cpu import CpuReferenceBuilder
from conformance.audit import LayerProtocol, run_audit
from conformance.cli.main import main as conformance_main
from conformance.errors import StubIncompleteError
from conformance.metadata import batch
from conformance.metadata.dims import DEEPSEEK_R1, get_mla_dims
from conformance.stubs.factory import (
    record_builder_reads,
    require_complete_context,
    require_complete_stub,
    stub_problems,
)
from conformance.stubs.protocol import MLA_BUILDER_LAYER_PROTOCOL

THIS_FILE = Path(__file__).name
LAYER = "placeholder"
CONFIG = BuilderConfig(kv_cache=KVCacheSpec(block_size=16), max_model_len=4096, max_num_seqs=64)


def cpu_builder(context: dict[str, Any]) -> CpuReferenceBuilder:
    """The reference builder over `context`."""
    return CpuReferenceBuilder(CONFIG, [LAYER], context)


MIXED = batch.make_cam(batch.BATCH_SPECS["mixed_small"], block_size=16)


def context_52139(*, with_q_lora_rank: bool) -> tuple[dict[str, Any], int]:
    """vLLM #52139's stub: a `SimpleNamespace` with a tensor for the prefill backend.

    Before the fix it lacked the five dims; here it lacks only `q_lora_rank` (or, fixed,
    nothing). Returns the context and the line the stub was built on.
    """
    dims = get_mla_dims(DEEPSEEK_R1)
    extra = {"q_lora_rank": dims.q_lora_rank} if with_q_lora_rank else {}
    static_forward_context: dict[str, Any] = {}
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    static_forward_context[LAYER] = (
        SimpleNamespace(  # conformance-audit: ignore[STUB001,STUB002,STUB003]
            prefill_backend=torch.empty((1,)),
            kv_lora_rank=dims.kv_lora_rank,
            qk_nope_head_dim=dims.qk_nope_head_dim,
            qk_rope_head_dim=dims.qk_rope_head_dim,
            v_head_dim=dims.v_head_dim,
            **extra,
        )
    )
    return static_forward_context, line


def test_52139_stub_fails_the_dynamic_check_naming_q_lora_rank(traced_allocations):
    context, line = context_52139(with_q_lora_rank=False)
    with pytest.raises(StubIncompleteError) as exc:
        require_complete_context(context, MLA_BUILDER_LAYER_PROTOCOL)
    assert exc.value.path == "q_lora_rank"
    message = str(exc.value)
    assert "'q_lora_rank'" in message
    assert f"SimpleNamespace {LAYER!r}" in message
    built = re.search(rf"stub built at \S*{THIS_FILE}:(\d+)\)", message)
    assert built is not None, message
    assert line <= int(built.group(1)) <= line + 7, message  # within the SimpleNamespace call
    kinds = {p.path: p.kind for p in stub_problems(context[LAYER], MLA_BUILDER_LAYER_PROTOCOL)}
    assert kinds == {
        "q_lora_rank": "missing",
        "prefill_backend.clone": "accidental",
        "<class>": "class",
    }


def test_52139_stub_fails_the_real_builder_under_recording():
    context, _ = context_52139(with_q_lora_rank=False)
    with pytest.raises(StubIncompleteError, match="'q_lora_rank'") as exc:
        record_builder_reads(cpu_builder, context[LAYER], [MIXED], layer_name=LAYER)
    assert exc.value.path == "q_lora_rank"
    assert f"SimpleNamespace {LAYER!r}" in str(exc.value)


def test_52139_fix_is_still_flagged_for_its_accidental_prefill_backend():
    context, _ = context_52139(with_q_lora_rank=True)
    problems = stub_problems(context[LAYER], MLA_BUILDER_LAYER_PROTOCOL)
    assert [(p.path, p.kind) for p in problems] == [
        ("prefill_backend.clone", "accidental"),
        ("<class>", "class"),
    ]
    with pytest.raises(StubIncompleteError, match=r"torch\.Tensor") as exc:
        require_complete_stub(context[LAYER], MLA_BUILDER_LAYER_PROTOCOL, name=LAYER)
    assert exc.value.path == "prefill_backend.clone"
    assert "not an AttentionLayerBase subclass" in str(exc.value)


SOURCE_52139 = """\
import types

import torch


def _build_decode_metadata(vllm_config, mla_dims):
    layer_name = "placeholder"
    vllm_config.compilation_config.static_forward_context[layer_name] = (
        types.SimpleNamespace(
            prefill_backend=torch.empty((1,)),
            kv_lora_rank=mla_dims.kv_lora_rank,
            qk_nope_head_dim=mla_dims.qk_nope_head_dim,
            qk_rope_head_dim=mla_dims.qk_rope_head_dim,
            v_head_dim=mla_dims.v_head_dim,{fixed}
        )
    )
"""
STUB_LINE_52139 = 9  # the line of `types.SimpleNamespace(` above


def write_52139_tree(root: Path, *, fixed: bool) -> Path:
    """A source tree holding the #52139 test file (broken, or with `q_lora_rank`)."""
    path = root / "tests" / "kernels" / "attention" / "test_rocm_aiter_mla_decode_metadata.py"
    path.parent.mkdir(parents=True)
    extra = "\n            q_lora_rank=mla_dims.q_lora_rank," if fixed else ""
    path.write_text(SOURCE_52139.replace("{fixed}", extra), encoding="utf-8")
    return path


def test_static_audit_reports_the_52139_stub_file_and_line(tmp_path):
    path = write_52139_tree(tmp_path, fixed=False)
    protocol = LayerProtocol({"cpu": MLA_BUILDER_LAYER_PROTOCOL}, source="test")
    report = run_audit([tmp_path], audits=("stubs",), protocol=protocol)
    missing = [f for f in report.findings if f.code == "STUB001"]
    assert len(missing) == 1, report.to_text()
    finding = missing[0]
    assert Path(finding.path).resolve() == path.resolve()
    assert finding.line == STUB_LINE_52139, report.to_text()
    assert finding.names == ("q_lora_rank",)
    assert report.exit_code == 1


def test_audit_command_reports_the_52139_stub_and_passes_the_fix(tmp_path, capsys):
    broken = write_52139_tree(tmp_path / "broken", fixed=False)
    assert conformance_main(["audit", "--only", "stubs", str(tmp_path / "broken")]) == 1
    out = capsys.readouterr().out
    assert f"{broken}:{STUB_LINE_52139}: STUB001" in out, out
    assert "q_lora_rank" in out
    write_52139_tree(tmp_path / "fixed", fixed=True)
    assert conformance_main(["audit", "--only", "stubs", str(tmp_path / "fixed")]) == 0
    assert "STUB001" not in capsys.readouterr().out
