"""AITER's MLA decode kernel tables and which kernel a persistent decode asks for, torch-free.

AITER ships its assembly MLA kernels with one table per arch (``hsa/<arch>/mla/mla_asm.csv``:
``qType, kvType, Gqa, ps, qSeqLen, prefill, causal, lse[, cprr], knl_name, co_name``). A
persistent ``aiter.mla.mla_decode_fwd`` call picks one row: ``aiter/mla.py`` first folds the
heads (or keeps them native), then ``csrc/py_itfs_cu/asm_mla.cu`` maps the head count and
query length to a row's ``Gqa``/``qSeqLen`` and looks it up with ``lse = return_lse``. A
lookup that finds no row fails an ``AITER_CHECK`` inside a ctypes op: the process aborts.

`KernelTable` is one table as data; `choose` models AITER's choice (read at ROCm/aiter
e4048607a5, `SELECTION_SOURCE`, with ``AITER_ENABLE_EXPERIMENTAL`` and ``AITER_MLA_USE_OPUS``
unset, no context parallelism) and says, for one decode shape, which kernel runs, whether an
LSE variant exists, and otherwise AITER's reason. The harness and sign-off derive "not
applicable" and "LSE not comparable" from it (`conformance.applicability`); the ``rocm``
backend asks AITER for an LSE only where `choose` finds one.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SELECTION_SOURCE = "ROCm/aiter e4048607a5 (aiter/mla.py, csrc/py_itfs_cu/asm_mla.cu)"
"""The AITER source whose kernel choice `choose` models."""
KEY_COLUMNS: tuple[str, ...] = ("qType", "kvType", "Gqa", "ps", "qSeqLen", "prefill", "causal")
ARCHES: tuple[str, ...] = ("gfx942", "gfx950")
FNUZ_ARCH = "gfx942"
"""The arch whose ``aiter.dtypes.fp8`` is e4m3fnuz (e4m3fn elsewhere)."""


@dataclass(frozen=True)
class KernelRow:
    """One decode row of a table: the lookup key and the kernel's symbol name."""

    q_type: str
    kv_type: str
    gqa: int
    persistent: bool
    q_seq_len: int
    causal: bool
    lse: bool
    name: str

    def to_json(self) -> list[Any]:
        """The row as a sidecar records it (`KernelTable.from_json` reads it back)."""
        return [
            self.q_type,
            self.kv_type,
            self.gqa,
            int(self.persistent),
            self.q_seq_len,
            int(self.causal),
            int(self.lse),
            self.name,
        ]


@dataclass(frozen=True)
class KernelTable:
    """The decode kernels (``prefill=0``, ``cprr=0``) one AITER ships for one arch."""

    arch: str
    rows: tuple[KernelRow, ...]
    source: str
    """Where the table was read: ``aiter <version>: <path>`` or a vendored copy's commit."""

    def find(self, key: tuple[str, str, int, int, bool], *, lse: bool) -> KernelRow | None:
        """The persistent row of ``(q_type, kv_type, Gqa, qSeqLen, causal)`` with or without
        LSE (None: AITER's lookup fails)."""
        for row in self.rows:
            found = (row.q_type, row.kv_type, row.gqa, row.q_seq_len, row.causal)
            if row.persistent and found == key and row.lse == lse:
                return row
        return None

    def to_json(self) -> dict[str, Any]:
        """As a sidecar records it (one list per row)."""
        return {
            "arch": self.arch,
            "source": self.source,
            "rows": [row.to_json() for row in self.rows],
        }

    @classmethod
    def from_json(cls, data: object) -> KernelTable | None:
        """A table recorded by `to_json`; None when it is malformed."""
        if not isinstance(data, Mapping):
            return None
        arch, source, rows = data.get("arch"), data.get("source"), data.get("rows")
        if not isinstance(arch, str) or not isinstance(source, str) or not isinstance(rows, list):
            return None
        try:
            made = tuple(
                KernelRow(str(q), str(kv), int(g), bool(ps), int(s), bool(c), bool(lse), str(n))
                for q, kv, g, ps, s, c, lse, n in rows
            )
        except (TypeError, ValueError):
            return None
        return cls(arch, made, source)


def parse_table(text: str, *, arch: str, source: str) -> KernelTable:
    """The decode rows of one ``mla_asm.csv``; ValueError names the line and column."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in (*KEY_COLUMNS, "lse", "knl_name") if c not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(f"{source}: line 1: no column {', '.join(missing)}")
    rows = []
    for line, record in enumerate(reader, start=2):
        if None in record or None in record.values():
            width = len(reader.fieldnames or ())
            raise ValueError(f"{source}: line {line}: expected {width} fields")
        try:
            values = {c: int(record[c]) for c in (*KEY_COLUMNS[2:], "lse")}
            cprr = int(record.get("cprr") or 0)
        except (TypeError, ValueError):
            bad = next(c for c in (*KEY_COLUMNS[2:], "lse") if not str(record[c]).isdigit())
            raise ValueError(
                f"{source}: line {line}: {bad}={record[bad]!r} is no integer"
            ) from None
        if values["prefill"] or cprr:
            continue
        rows.append(
            KernelRow(
                q_type=record["qType"],
                kv_type=record["kvType"],
                gqa=values["Gqa"],
                persistent=bool(values["ps"]),
                q_seq_len=values["qSeqLen"],
                causal=bool(values["causal"]),
                lse=bool(values["lse"]),
                name=record["knl_name"],
            )
        )
    return KernelTable(arch, tuple(rows), source)


def aiter_type(dtype: str, arch: str) -> str | None:
    """AITER's type name of a dtype label (``bf16``, ``e4m3fn``, ``e4m3fnuz``) on `arch`:
    ``bf16``, ``fp8`` for the arch's own flavour, None for any other."""
    if dtype == "bf16":
        return "bf16"
    return "fp8" if dtype == ("e4m3fnuz" if arch == FNUZ_ARCH else "e4m3fn") else None


@dataclass(frozen=True)
class KernelChoice:
    """What AITER runs for one persistent decode shape."""

    key: str
    """The lookup key in AITER's words: ``q_type:fp8 kv_type:fp8 gqa:16 qseqlen:4 causal:1``."""
    kernel: KernelRow | None
    lse_kernel: KernelRow | None
    reason: str | None
    """Why there is no kernel (None when there is one)."""

    @property
    def lse_reason(self) -> str | None:
        """Why the LSE is not comparable (None when an LSE variant exists)."""
        if self.kernel is None or self.lse_kernel is not None:
            return None
        return f"no LSE variant of {self.kernel.name} ({self.key} lse:1 is not in the table)"


def _fold(arch: str, q: str, kv: str, heads: int, q_len: int) -> int | str:
    """``aiter/mla.py``'s persistent path: the heads the kernel sees, or why it asserts."""
    fp8, bf16 = (q, kv) == ("fp8", "fp8"), (q, kv) == ("bf16", "bf16")
    gfx942, gfx950 = arch == "gfx942", arch == "gfx950"
    native = (
        heads == 16
        or (gfx942 and heads == 128 and fp8)
        or (gfx950 and fp8 and heads in (32, 64, 128))
        or (gfx950 and heads == 8 and fp8 and q_len == 4)
        or (gfx942 and heads == 8 and bf16 and q_len == 2)
        or (gfx942 and heads == 64 and fp8 and q_len == 1)
        or (gfx950 and bf16)
    )
    if native:
        return heads
    if heads in range(32, 129, 16):
        return 16
    return f"aiter/mla.py asserts: nhead={heads} and max_seqlen_q={q_len} not supported"


def _config(arch: str, q: str, kv: str, gqa: int, q_len: int) -> tuple[int, int] | str:
    """``asm_mla.cu``'s ``(Gqa, qSeqLen)`` key of a persistent call, or its failed check."""
    fp8, bf16, gfx950 = (q, kv) == ("fp8", "fp8"), (q, kv) == ("bf16", "bf16"), arch == "gfx950"
    key_gqa, key_len = gqa, q_len
    if gqa == 128:
        key_len = 0
    elif gqa == 16 and q == "fp8":
        if q_len <= 4:
            key_len = q_len if q_len <= 2 else 4
        elif gfx950:
            key_gqa, key_len = 32, 4
        else:
            return "only support gqa_ratio=16 fp8 mla decoding with qo_len <= 4 [...] on gfx950"
    elif gqa == 16 and q_len <= 4:  # bf16 q over a bf16 or fp8 cache
        key_len = 4
    elif gqa == 32 and fp8:
        if q_len >= 3 and not gfx950:
            return "fp8/fp8 with gqa_ratio=32 only supports decode_qlen=1,2 [...] on gfx950"
        key_len = 4 if q_len >= 3 else q_len
    elif gqa == 64 and fp8:
        key_len = 1 if q_len == 1 else 4
    if gfx950 and bf16 and (gqa * q_len >= 128 or gqa > 64) and gqa != 48:
        key_gqa, key_len = 32, 4
    elif gfx950 and bf16 and (gqa * q_len >= 64 or gqa >= 16):
        key_gqa, key_len = 64, 1
    elif (
        gfx950 and fp8 and ((gqa == 32 and q_len >= 4) or (gqa == 64 and q_len >= 2) or gqa == 128)
    ):
        key_gqa, key_len = 32, 4
    elif (
        gfx950
        and fp8
        and (
            (gqa == 16 and q_len in (3, 4))
            or (gqa == 32 and q_len in (2, 3))
            or (gqa == 64 and q_len == 1)
        )
    ):
        key_gqa, key_len = 16, 4
    return key_gqa, key_len


def choose(
    table: KernelTable, *, q_dtype: str, kv_dtype: str, heads: int, q_len: int, causal: bool
) -> KernelChoice:
    """The kernel AITER's persistent decode of this shape runs (dtype labels as in
    `conformance.applicability`), its LSE variant, or why there is none."""
    arch = table.arch
    q, kv = aiter_type(q_dtype, arch), aiter_type(kv_dtype, arch)
    shape = f"q {q_dtype}, kv {kv_dtype}, {heads} heads, q_len {q_len}"
    if q is None or kv is None:
        other = q_dtype if q is None else kv_dtype
        return KernelChoice(shape, None, None, f"{other} is not aiter.dtypes.fp8 on {arch}")
    if arch not in ARCHES:
        return KernelChoice(shape, None, None, f"the kernel choice of {arch} is not modelled")
    folded = _fold(arch, q, kv, heads, q_len)
    if isinstance(folded, str):
        return KernelChoice(shape, None, None, folded)
    config = _config(arch, q, kv, folded, q_len)
    if isinstance(config, str):
        return KernelChoice(shape, None, None, f"asm_mla.cu's check fails (abort): {config}")
    gqa, key_len = config
    key_causal = causal or q_len == 1  # one query token: the masked kernel serves both
    key = f"q_type:{q} kv_type:{kv} gqa:{gqa} ps:1 qseqlen:{key_len} causal:{int(key_causal)}"
    plain = table.find((q, kv, gqa, key_len, key_causal), lse=False)
    with_lse = table.find((q, kv, gqa, key_len, key_causal), lse=True)
    if plain is None and with_lse is None:
        reason = (
            f"{table.source} has no kernel for {key} "
            f"(asm_mla.cu aborts: cannot get heuristic kernel)"
        )
        return KernelChoice(key, None, None, reason)
    return KernelChoice(key, plain or with_lse, with_lse, None)
