"""Measured engine facts (`conformance.engines.facts`) for the selftests: those an engine
target would write for the audit selftests' mechanism tree (``pkg.builders``, ``pkg.record``).

A test double of the selftests (importable as ``engine_facts``: pyproject.toml puts
``tests/selftest/support`` on pytest's path).
"""

from __future__ import annotations

from conformance.engines.facts import BuilderFacts, EngineFacts, FieldFacts, TransformFacts

MISSING = "AttributeError: 'SimpleNamespace' object has no attribute 'kv_lora_rank'"


def make_facts(version: str = "1.2.3", needed: tuple[str, ...] = ("mixed",)) -> EngineFacts:
    """Plausible facts of the mechanism tree's engine, as an engine target would write.

    Builder ``A`` needs ``kv_lora_rank`` and, on the batch kinds `needed`,
    ``seq_lens_cpu_upper_bound``; ``PLAIN`` needs ``scale`` and ``positions``.
    """
    builders = {
        "A": BuilderFacts(
            cls="pkg.builders.ABuilder",
            bases=("pkg.builders.CommonBuilder",),
            batch_kinds=("decode", "mixed"),
            reads={"init": ("kv_lora_rank", "prefill_backend"), "build": ()},
            required={"kv_lora_rank": MISSING},
        ),
        "PLAIN": BuilderFacts(
            cls="pkg.builders.PlainBuilder",
            batch_kinds=("decode",),
            reads={"init": ("scale",)},
            required={"scale": "AttributeError: scale"},
        ),
    }
    fields = {
        "seq_lens_cpu_upper_bound": FieldFacts(
            optional=True,
            needed_by={"A": needed} if needed else {},
            errors={f"A/{k}": "AssertionError" for k in needed},
        ),
        "positions": FieldFacts(optional=True, needed_by={"PLAIN": ("decode",)}),
    }
    return EngineFacts(
        engine="vllm",
        version=version,
        record_class="pkg.record.CommonAttentionMetadata",
        record_fields=("query_start_loc", "num_reqs", *fields),
        optional_fields=tuple(fields),
        builders=builders,
        fields=fields,
        transformations={"unpadded": TransformFacts(ran=True, dropped=("positions",))},
    )
