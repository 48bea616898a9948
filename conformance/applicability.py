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
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from conformance.aiter_kernels import KernelTable, choose

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
LSE_NOT_APPLICABLE = "lse_not_applicable"
"""The JUnit property of a test whose LSE the suite derives is not comparable (its reason)."""
PAIR_SHAPE: tuple[int, int, bool] = (16, 4, True)
"""Heads, query length and causality of the tests run once per dtype pair (the masking batch,
`conformance.numerics.masking`)."""


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
    kernels: KernelTable | None = field(default=None, compare=False)
    """The kernel table of the library the backend runs (``Backend.kernel_table()``, AITER's
    for ``rocm``): a fact of the installed library, so left out of comparisons."""

    @classmethod
    def of(cls, backend: Any) -> Declaration:
        """The declaration of a `Backend` instance or class."""
        pairs = getattr(backend, "dtype_pairs", None)
        pages = getattr(backend, "page_sizes", None)
        tables = None if isinstance(backend, type) else getattr(backend, "kernel_table", None)
        return cls(
            backend=str(backend.name),
            plan_format=backend.plan_format,
            q_dtypes=tuple(map(dtype_label, backend.q_dtypes)),
            kv_dtypes=tuple(map(dtype_label, backend.kv_dtypes)),
            numerics=str(backend.numerics),
            dtype_pairs=None if pairs is None else tuple(pair_label(q, kv) for q, kv in pairs),
            page_sizes=None if pages is None else tuple(int(p) for p in pages),
            kernels=tables() if callable(tables) else None,
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
        kernels = KernelTable.from_json(data.get("kernels"))
        if kernels is None and data.get("kernels") is not None:
            return None
        return cls(
            backend,
            plan_format,
            tuple(dtypes[0]),
            tuple(dtypes[1]),
            numerics,
            None if pairs is None else tuple(pairs),
            None if pages is None else tuple(pages),
            kernels,
        )

    def to_json(self) -> dict[str, Any]:
        """The declaration as a sidecar records it (the optional facts only when declared,
        ``kernels`` only where there is a table)."""
        made: dict[str, Any] = {
            "plan_format": self.plan_format,
            "q_dtypes": list(self.q_dtypes),
            "kv_dtypes": list(self.kv_dtypes),
            "numerics": self.numerics,
        }
        for name in OPTIONAL_FACTS:
            value = getattr(self, name)
            if value is not None:
                made[name] = list(value)
        if self.kernels is not None:
            made["kernels"] = self.kernels.to_json()
        return made

    def words(self) -> str:
        """`to_json` in words: ``plan_format=None, q_dtypes=(bf16), kv_dtypes=(bf16), ...``."""
        facts = self.to_json()
        facts.pop("kernels", None)
        words = [
            f"{name}=({', '.join(map(str, value))})"
            if isinstance(value, list)
            else f"{name}={value}"
            for name, value in facts.items()
        ]
        if self.kernels is not None:
            words.append(f"kernels={self.kernels.source}")
        return ", ".join(words)


@dataclass(frozen=True)
class CaseFacts:
    """What applicability needs of a golden case: its dtypes and whether a CAM expresses it."""

    id: str
    q_dtype: str
    kv_dtype: str
    via_builder: bool = True
    heads: int = PAIR_SHAPE[0]
    q_len: int = PAIR_SHAPE[1]
    causal: bool = PAIR_SHAPE[2]

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> CaseFacts:
        """From a row of the case table (``fp8`` resolved to the arch's flavour)."""
        fp8 = fp8_label(str(row["arch"]))
        return cls(
            id=str(row["id"]),
            q_dtype=fp8 if row["q_dtype"] == "fp8" else "bf16",
            kv_dtype=fp8 if row["kv_dtype"] == "fp8" else "bf16",
            via_builder=bool(row.get("via_builder", True)),
            heads=int(row["heads"]),
            q_len=int(row["q_len"]),
            causal=bool(row.get("causal", True)),
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


def _kernel_choice(declaration: Declaration, case: CaseFacts):  # -> KernelChoice | None
    if declaration.kernels is None:
        return None
    return choose(
        declaration.kernels,
        q_dtype=case.q_dtype,
        kv_dtype=case.kv_dtype,
        heads=case.heads,
        q_len=case.q_len,
        causal=case.causal,
    )


def _kernel(declaration: Declaration, case: CaseFacts | None) -> str | None:
    """Why a decode of this case has no kernel in the declared table (None: it has one)."""
    choice = _kernel_choice(declaration, _known(case))
    if choice is None or choice.kernel is not None:
        return None
    return f"{NOT_APPLICABLE}no {declaration.kernels.arch} kernel: {choice.reason}"  # type: ignore[union-attr]


ApplicabilityRule = Callable[[Declaration, "CaseFacts | None"], "str | None"]
"""Why a test does not apply to a declaration and case (None: it applies)."""
TEST_RULES: Mapping[str, tuple[ApplicabilityRule, ...]] = {
    "test_plan.py": (_plan,),
    "test_plan.py::test_planner_call_replays_with_fp8_dtypes": (_plan, _fp8_case),
    "test_plan.py::test_decode_is_plan_invariant": (_plan, _cam_case, _kernel),
    "test_numerics.py::test_decode_matches_golden": (_dtypes, _kernel),
    "test_numerics.py::test_poisoned_slots_never_reach_the_output": (_dtypes, _kernel),
    "test_masking.py::test_no_token_outside_the_causal_window_reaches_the_output": (
        _dtypes,
        _kernel,
    ),
}
"""The rules each conformance test (``file::function``, or a whole ``file``) is subject to,
in the order they are asked; the first that gives a reason decides."""


def split_node_id(node_id: str) -> tuple[str, str, str | None]:
    """``(file name, function, parameter id or None)`` of a pytest node id."""
    path, _, rest = node_id.partition("::")
    function, bracket, param = rest.partition("[")
    return path.rsplit("/", 1)[-1], function, param[:-1] if bracket else None


def rules_of(node_id: str) -> tuple[ApplicabilityRule, ...]:
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


DECODING_TESTS: frozenset[str] = frozenset(
    name for name, rules in TEST_RULES.items() if _kernel in rules
)
"""The tests that decode (``file::function``): those a kernel table can rule out."""


def lse_not_comparable(
    declaration: Declaration, node_id: str, cases: Mapping[str, CaseFacts] | None = None
) -> str | None:
    """Why the LSE of the decoding test ``node_id`` is not comparable (None: it is).

    Only a declared kernel table says so: the case's kernel exists but has no LSE variant,
    so the backend decodes without one. Tests that do not apply have no LSE reason either.
    """
    file_name, function, param = split_node_id(node_id)
    if f"{file_name}::{function}" not in DECODING_TESTS or param is None:
        return None
    if declaration.kernels is None or not_applicable(declaration, node_id, cases) is not None:
        return None
    table = case_facts_table() if cases is None else cases
    case = table.get(param) or _pair_facts(param)
    choice = None if case is None else _kernel_choice(declaration, case)
    if choice is None or choice.lse_reason is None:
        return None
    return f"LSE not comparable on {declaration.kernels.arch}: {choice.lse_reason}"


LSE_EXEMPTION: ContextVar[str | None] = ContextVar("lse_exemption", default=None)
"""The running test's `lse_not_comparable` reason, set by the harness around its call."""


def lse_compared(lse: object, what: str) -> bool:
    """Whether a decode's LSE is to be compared: True when the backend returned one; False
    when it returned None and the suite derives the LSE is not comparable for this test.
    An LSE missing anywhere else fails, naming `what`: a backend cannot drop it on its own."""
    __tracebackhide__ = True
    if lse is not None:
        return True
    reason = LSE_EXEMPTION.get()
    if reason is None:
        raise AssertionError(
            f"{what}: the decode returned no LSE, but the suite derives no reason for that "
            f"(the declared kernel table has an LSE variant for this case, or none is declared)"
        )
    return False
