"""vLLM's own record transformations, and the fields each drops.

Each transformation present in the installed vLLM is run on a record with every optional
field set (`filled_record`); a field set going in and unset coming out is a drop, reported
by name. A transformation the installed vLLM lacks is reported not run, with the reason.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from conformance.engines import checks
from conformance.engines.facts import TransformFacts
from conformance.metadata.batch import BATCH_SPECS

# name -> (module, attribute) of a transformation that is a function of vLLM's (not a method)
FUNCTIONS = {
    "ubatch_slice": ("vllm.v1.worker.ubatch_utils", "_make_metadata_with_slice"),
    "extend_all_queries_by_N": ("vllm.v1.spec_decode.utils", "extend_all_queries_by_N"),
}
SPEC = BATCH_SPECS["mixed_small"]


def _filler(field: dataclasses.Field, record: Any) -> Any:
    """A plausible value for an optional field, from its declared type; None if unknown."""
    text = str(field.type)
    reqs, tokens = record.num_reqs, record.num_actual_tokens
    if field.name == "positions":
        return torch.arange(tokens, dtype=torch.int64)
    if "ndarray" in text:
        return np.arange(reqs, dtype=np.int32)
    if "dict" in text:
        return {0: [(0, 1)]}
    if "Tensor" in text:
        return record.seq_lens.clone()
    if text.startswith("int") or text == "<class 'int'>":
        return 1
    return None


def filled_record(engine: Any) -> tuple[Any, tuple[str, ...]]:
    """A record of the mixed batch with every optional field set; and those left unset."""
    record = engine.record(SPEC)
    unset = []
    for field in dataclasses.fields(record):
        if field.name.startswith("_") or getattr(record, field.name) is not None:
            continue
        value = _filler(field, record)
        if value is None:
            unset.append(field.name)
        else:
            setattr(record, field.name, value)
    return record, tuple(unset)


def _runs(record: Any) -> dict[str, Callable[[], Any]]:
    runs: dict[str, Callable[[], Any]] = {
        "unpadded": lambda: record.unpadded(record.num_actual_tokens, record.num_reqs),
        "replace": lambda: record.replace(max_seq_len=record.max_seq_len),
    }
    for name, (module, attribute) in FUNCTIONS.items():
        try:
            function = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as error:
            runs[name] = _absent(checks.one_line(error))
            continue
        if name == "ubatch_slice":
            from vllm.v1.worker.ubatch_utils import UBatchSlice

            whole = UBatchSlice(slice(0, record.num_reqs), slice(0, record.num_actual_tokens))
            runs[name] = lambda f=function, s=whole: f(s, record)
        else:
            size = record.num_reqs + 1
            runs[name] = lambda f=function, n=size: f(
                record,
                1,
                torch.arange(n, dtype=torch.int32),
                torch.zeros(record.num_actual_tokens + record.num_reqs, dtype=torch.int64),
            )
    return runs


class _Absent(Exception):
    pass


def _absent(reason: str) -> Callable[[], Any]:
    def run() -> Any:
        raise _Absent(reason)

    return run


def transformation_facts(engine: Any) -> dict[str, TransformFacts]:
    """Run each transformation once on a filled record; its drops, or why it did not run."""
    record, unset = filled_record(engine)
    facts = {}
    for name, run in _runs(record).items():
        try:
            out = run()
        except _Absent as reason:
            facts[name] = TransformFacts(ran=False, reason=f"not in this vLLM: {reason}")
            continue
        except Exception as error:  # the engine's own code failing is reported, not raised
            facts[name] = TransformFacts(ran=False, reason=checks.one_line(error))
            continue
        note = f"fields not exercised (no filler for their type): {list(unset)}" if unset else ""
        facts[name] = TransformFacts(
            ran=True, dropped=checks.dropped_fields(record, out), reason=note
        )
    facts["split_decodes_and_prefills"] = TransformFacts(
        ran=False, reason="returns request/token counts, not a record: nothing to propagate"
    )
    return facts
