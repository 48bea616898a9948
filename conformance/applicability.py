"""What does not apply to a backend: one derivation from its declaration and the test, torch-free.

A conformance test is *not applicable* to a backend when the backend's own declaration rules it
out (`Backend.plan_format`, ``q_dtypes``, ``kv_dtypes``) or the golden case lacks what the test
is about. `not_applicable` is the one place that says so: the harness skips a test with its
reason (nothing else may claim ``not applicable: ...``), and the sign-off re-derives every such
skip from the declaration and the test id; a claim it does not re-derive blocks.

The dependencies of each test are the table `TEST_RULES`; the golden cases' dtypes come from
``conformance/goldens/cases.json`` (fp8 is the arch's e4m3 flavour: e4m3fnuz on gfx942), those
of a test run once per dtype pair from its parameter id (`dtype_pair_id`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

NOT_APPLICABLE = "not applicable: "
"""How the reason of a test that does not apply to a backend's declaration begins."""
AITER_V1 = "aiter-v1"
"""The plan format of AITER's ``get_mla_metadata_v1`` buffers (`conformance.persistent`)."""
FNUZ_ARCHES: frozenset[str] = frozenset({"gfx942"})
"""Architectures whose fp8 is the "fnuz" flavour (AITER's dtypes.fp8 on MI300)."""
CASES_PATH = Path(__file__).with_name("goldens") / "cases.json"
DECLARED_FACTS: tuple[str, ...] = ("plan_format", "q_dtypes", "kv_dtypes", "numerics")
OPTIONAL_FACTS: tuple[str, ...] = ("dtype_pairs", "page_sizes")
"""Declared only by backends that restrict them; recorded only when declared."""


def dtype_label(dtype: Any) -> str:
    """Short name of a q/KV dtype: ``bf16``, ``e4m3fn``, ``e4m3fnuz`` (torch dtype or label)."""
    text = str(dtype).removeprefix("torch.")
    return "bf16" if text in ("bfloat16", "bf16") else text.removeprefix("float8_")


def fp8_label(arch: str) -> str:
    """The e4m3 flavour an architecture computes with: e4m3fnuz on gfx942, e4m3fn otherwise."""
    return "e4m3fnuz" if arch in FNUZ_ARCHES else "e4m3fn"


@dataclass(frozen=True)
class Declaration:
    """What a backend declares about the contracts it takes (dtypes as labels)."""

    backend: str
    plan_format: str | None = None
    q_dtypes: tuple[str, ...] = ("bf16",)
    kv_dtypes: tuple[str, ...] = ("bf16",)
    numerics: str = "fp32-reference"
    dtype_pairs: tuple[str, ...] | None = None
    """The (q, kv) pairs its decode takes, as ``q/kv`` labels, where not every pair of
    ``q_dtypes`` x ``kv_dtypes`` is (None: every pair)."""
    page_sizes: tuple[int, ...] | None = None
    """The only page sizes its kernel reads (None: any); the suite re-lays a batch of
    another page size into the first (`conformance.goldens.relayout`)."""

    @classmethod
    def of(cls, backend: Any) -> Declaration:
        """The declaration of a `Backend` instance or class."""
        pairs = getattr(backend, "dtype_pairs", None)
        pages = getattr(backend, "page_sizes", None)
        return cls(
            backend=str(backend.name),
            plan_format=backend.plan_format,
            q_dtypes=tuple(map(dtype_label, backend.q_dtypes)),
            kv_dtypes=tuple(map(dtype_label, backend.kv_dtypes)),
            numerics=str(backend.numerics),
            dtype_pairs=None if pairs is None else tuple(pair_label(q, kv) for q, kv in pairs),
            page_sizes=None if pages is None else tuple(int(p) for p in pages),
        )

    @classmethod
    def from_json(cls, backend: str, data: object) -> Declaration | None:
        """A declaration recorded in a sidecar; None when it is absent or malformed."""
        if not isinstance(data, Mapping):
            return None
        plan_format, numerics = data.get("plan_format"), data.get("numerics")
        dtypes = [data.get("q_dtypes"), data.get("kv_dtypes")]
        if not (plan_format is None or isinstance(plan_format, str)) or not isinstance(
            numerics, str
        ):
            return None
        if not all(isinstance(d, list) and all(isinstance(x, str) for x in d) for d in dtypes):
            return None
        pairs, pages = data.get("dtype_pairs"), data.get("page_sizes")
        if pairs is not None and not (
            isinstance(pairs, list) and all(isinstance(x, str) for x in pairs)
        ):
            return None
        if pages is not None and not (
            isinstance(pages, list) and all(type(x) is int and x > 0 for x in pages)
        ):
            return None
        return cls(
            backend,
            plan_format,
            tuple(dtypes[0]),
            tuple(dtypes[1]),
            numerics,
            None if pairs is None else tuple(pairs),
            None if pages is None else tuple(pages),
        )

    def to_json(self) -> dict[str, Any]:
        """The declaration as a sidecar records it (the optional facts only when declared)."""
        facts: dict[str, Any] = {
            "plan_format": self.plan_format,
            "q_dtypes": list(self.q_dtypes),
            "kv_dtypes": list(self.kv_dtypes),
            "numerics": self.numerics,
        }
        for name in OPTIONAL_FACTS:
            value = getattr(self, name)
            if value is not None:
                facts[name] = list(value)
        return facts

    def words(self) -> str:
        """`to_json` in words: ``plan_format=None, q_dtypes=(bf16), kv_dtypes=(bf16), ...``."""
        return ", ".join(
            f"{name}=({', '.join(map(str, value))})"
            if isinstance(value, list)
            else f"{name}={value}"
            for name, value in self.to_json().items()
        )


@dataclass(frozen=True)
class CaseFacts:
    """What applicability needs of a golden case: its dtypes and whether a CAM expresses it."""

    id: str
    q_dtype: str
    kv_dtype: str
    via_builder: bool = True

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> CaseFacts:
        """From a row of the case table (``fp8`` resolved to the arch's flavour)."""
        fp8 = fp8_label(str(row["arch"]))
        return cls(
            id=str(row["id"]),
            q_dtype=fp8 if row["q_dtype"] == "fp8" else "bf16",
            kv_dtype=fp8 if row["kv_dtype"] == "fp8" else "bf16",
            via_builder=bool(row.get("via_builder", True)),
        )

    @property
    def has_fp8(self) -> bool:
        """Whether q or the cache is fp8."""
        return self.q_dtype != "bf16" or self.kv_dtype != "bf16"


def pair_label(q_dtype: Any, kv_dtype: Any) -> str:
    """``bf16/e4m3fn``: a q/KV dtype pair as a declaration names it."""
    return f"{dtype_label(q_dtype)}/{dtype_label(kv_dtype)}"


def dtype_pair_id(q_dtype: Any, kv_dtype: Any) -> str:
    """The parameter id of a test run once per q/KV dtype pair: ``q-bf16-kv-e4m3fn``."""
    return f"q-{dtype_label(q_dtype)}-kv-{dtype_label(kv_dtype)}"


def _pair_facts(param: str) -> CaseFacts | None:
    """The dtypes of a `dtype_pair_id` (None for any other id)."""
    q, kv_marker, kv = param.removeprefix("q-").partition("-kv-")
    if not param.startswith("q-") or not kv_marker or not q or not kv:
        return None
    return CaseFacts(id=param, q_dtype=q, kv_dtype=kv)


@cache
def case_facts_table(path: Path = CASES_PATH) -> dict[str, CaseFacts]:
    """The golden cases by id (empty when the table cannot be read)."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        return {str(row["id"]): CaseFacts.from_json(row) for row in rows}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


# --- the reasons, one function per fact --------------------------------------------------------


def plan_reason(declaration: Declaration) -> str | None:
    """Why the plan contract does not apply (None: it applies)."""
    if declaration.plan_format == AITER_V1:
        return None
    return f"{NOT_APPLICABLE}{declaration.backend} declares plan_format={declaration.plan_format}"


def dtype_reason(declaration: Declaration, q_dtype: str, kv_dtype: str) -> str | None:
    """Why a batch of these dtypes (labels) is not applicable (None: the backend takes it)."""
    for what, dtype, claimed in (
        ("q", q_dtype, declaration.q_dtypes),
        ("kv", kv_dtype, declaration.kv_dtypes),
    ):
        if dtype not in claimed:
            return (
                f"{NOT_APPLICABLE}{declaration.backend} declares {what}_dtypes="
                f"({', '.join(claimed)}), the case has {what} {dtype}"
            )
    pairs = declaration.dtype_pairs
    if pairs is not None and pair_label(q_dtype, kv_dtype) not in pairs:
        return (
            f"{NOT_APPLICABLE}{declaration.backend} declares dtype_pairs=({', '.join(pairs)}), "
            f"the case has q {q_dtype} over kv {kv_dtype}"
        )
    return None


def _known(case: CaseFacts | None) -> CaseFacts:
    if case is None:
        raise LookupError("the case is not in the case table")
    return case


def _plan(declaration: Declaration, case: CaseFacts | None) -> str | None:
    return plan_reason(declaration)


def _dtypes(declaration: Declaration, case: CaseFacts | None) -> str | None:
    case = _known(case)
    return dtype_reason(declaration, case.q_dtype, case.kv_dtype)


def _fp8_case(declaration: Declaration, case: CaseFacts | None) -> str | None:
    case = _known(case)
    if case.has_fp8:
        return None
    return f"{NOT_APPLICABLE}case {case.id} has neither an fp8 q nor an fp8 cache"


def _cam_case(declaration: Declaration, case: CaseFacts | None) -> str | None:
    case = _known(case)
    return (
        None
        if case.via_builder
        else f"{NOT_APPLICABLE}case {case.id} has no CommonAttentionMetadata"
    )


Rule = Callable[[Declaration, "CaseFacts | None"], "str | None"]
TEST_RULES: Mapping[str, tuple[Rule, ...]] = {
    "test_plan.py": (_plan,),
    "test_plan.py::test_planner_call_replays_with_fp8_dtypes": (_plan, _fp8_case),
    "test_plan.py::test_decode_is_plan_invariant": (_plan, _cam_case),
    "test_numerics.py::test_decode_matches_golden": (_dtypes,),
    "test_numerics.py::test_poisoned_slots_never_reach_the_output": (_dtypes,),
    "test_masking.py::test_no_token_outside_the_causal_window_reaches_the_output": (_dtypes,),
}
"""The rules each conformance test (``file::function``, or a whole ``file``) is subject to,
in the order they are asked; the first that gives a reason decides."""


def split_node_id(node_id: str) -> tuple[str, str, str | None]:
    """``(file name, function, parameter id or None)`` of a pytest node id."""
    path, _, rest = node_id.partition("::")
    function, bracket, param = rest.partition("[")
    return path.rsplit("/", 1)[-1], function, param[:-1] if bracket else None


def rules_of(node_id: str) -> tuple[Rule, ...]:
    """The rules a test is subject to (none for most tests)."""
    file_name, function, _ = split_node_id(node_id)
    return TEST_RULES.get(f"{file_name}::{function}") or TEST_RULES.get(file_name) or ()


def not_applicable(
    declaration: Declaration, node_id: str, cases: Mapping[str, CaseFacts] | None = None
) -> str | None:
    """Why the test ``node_id`` does not apply to ``declaration`` (None: it applies).

    The case is the test's parameter id: a golden case of ``cases`` (default: the case
    table), or a `dtype_pair_id`. Raises LookupError when a rule needs a case it cannot tell.
    """
    table = case_facts_table() if cases is None else cases
    param = split_node_id(node_id)[2]
    case = None if param is None else table.get(param) or _pair_facts(param)
    for rule in rules_of(node_id):
        try:
            reason = rule(declaration, case)
        except LookupError:
            raise LookupError(f"{node_id}: the case {param!r} is not in the case table") from None
        if reason is not None:
            return reason
    return None
