"""A builder chosen at run time: each candidate judged on its own.

A registry enum named whole (``AttentionBackendEnum[name]``) makes every member a
candidate (`reach`). The candidates a construction or stub *can pick* are all of them,
unless the file stores layer stubs: then only the candidates those stubs are written for
(a stub carries an attribute the candidate reads from layers) and those that read nothing
from layers (any stub serves them) — the MLA benchmark's ``MockLayer`` sets
``prefill_backend``, so its choice is made among the MLA builders, while an attention
benchmark whose stub carries only scales does not pick builders that read MLA dims. A construction
or stub is a finding when *any* candidate it can pick needs what it lacks; the message
names those candidates and the ones it is fine for (`RunTimeChoice.why`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conformance.audit.findings import join_names
from conformance.audit.index import Index
from conformance.audit.measured import Measured
from conformance.audit.reach import Reached, definer
from conformance.audit.usage import PREFILL_ONLY

_SHOWN = 4


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names(names: list[str]) -> str:
    if len(names) <= _SHOWN:
        return join_names(names)
    return ", ".join(names[:_SHOWN]) + f" and {len(names) - _SHOWN} more"


def layer_attributes(index: Index, candidate: Reached) -> set[str]:
    """The top-level attributes `candidate` reads from layers (any method)."""
    return {
        path.split(".")[0]
        for reads in index.by_method(candidate.target, "layer").values()
        for path, *_ in reads
    }


def picked(
    index: Index, candidates: list[Reached], stubs: list[tuple[int, set[str]]]
) -> tuple[list[Reached], int | None]:
    """The candidates a site or stub can pick, and the line of the stub that restricts them
    (None: no stub in the file, every candidate)."""
    if not stubs:
        return candidates, None
    found: list[Reached] = []
    line = None
    for candidate in candidates:
        reads = layer_attributes(index, candidate)
        for stub_line, attrs in stubs:
            if attrs & reads or not reads:
                found.append(candidate)
                line = stub_line if line is None else min(line, stub_line)
                break
    return found, line


class RunTimeChoice:
    """The candidates of one run-time choice that a site or stub can pick, with what each
    needs; `why` says which of them need what the site or stub lacks."""

    def __init__(
        self, candidates: list[Reached], considered: int, written_for: str | None, kind: str
    ) -> None:
        head = candidates[0].how.split(" (any member", 1)[0] if candidates else ""
        self.ref, _, self.where = head.partition(" named in ")
        self.total = len(candidates)
        self.considered = considered
        self.written_for = written_for
        """What restricts the candidates (``its layer stub at line 16``), else None."""
        self.kind = kind
        self.needs: dict[str, set[str]] = {}
        self.decodes = False
        """Fields read on the prefill path only are not needed (a decode-only site)."""

    def add(self, candidate: Reached, needs: Iterable[str]) -> None:
        """Record what `candidate` needs (fields, or layer attribute paths)."""
        self.needs.setdefault(candidate.target.name, set()).update(needs)

    def _needed(self, name: str) -> set[str]:
        found = set()
        for need in self.needs[name]:
            if PREFILL_ONLY in need and self.decodes:
                continue
            found.add(need.split(PREFILL_ONLY, 1)[0])
        return found

    def why(self, lacking: Iterable[str]) -> str:
        """Where the choice is made, which candidates need any of `lacking` (names or
        dotted paths) and which are fine."""
        wanted = {n.split(".")[0] for n in lacking} | set(lacking)
        need = sorted(_short(n) for n in self.needs if self._needed(n) & wanted)
        fine = sorted(_short(n) for n in self.needs if not self._needed(n) & wanted)
        text = f"chosen at run time from {self.ref}"
        text += f" (named in {self.where}): " if self.where else ": "
        verb = "needs" if len(need) == 1 else "need"
        text += f"{_names(need)} {verb} it ({len(need)} of the {self.considered} {self.kind}"
        if self.written_for is not None:
            text += f" {self.written_for} serves, of {self.total} candidates"
        text += ")"
        return text + (f"; fine for {_names(fine)}" if fine else "")

    def __str__(self) -> str:  # without the site's lack: every candidate that needs anything
        return self.why({n for name in self.needs for n in self._needed(name)})


def stub_attributes(index: Index, module: str, facts: dict[str, Any]) -> list[tuple[int, set[str]]]:
    """(line, attributes) of each layer stub stored in the file: the family of builders a
    file's stubs are written for is the family its run-time choice is made among."""
    found = []
    for shape in facts["stores"]:
        attrs = set(shape["attrs"])
        if shape["kind"] != "mapping":
            target = index.resolve_scoped(module, shape["q"], shape["cls"])
            if target is None or target.kind != "class":
                continue
            attrs |= index.attributes(target, instance=shape["kind"] == "instance")[0]
        found.append((shape["line"], attrs))
    return found


def choose(
    index: Index,
    module: str,
    facts: dict[str, Any],
    runtime: list[Reached],
    measured: Measured | None,
    kinds: tuple[str, ...],
    table: dict[str, list[str]],
    reasons: dict[str, Any],
) -> None:
    """Add to a construction site's `table` (consumer method → fields) what each candidate
    of a run-time choice it can pick needs, each consumer's reason being the choice."""
    candidates, line = picked(index, runtime, stub_attributes(index, module, facts))
    stub = None if line is None else f"its layer stub at line {line}"
    choice = RunTimeChoice(runtime, len(candidates), stub, "consumers")
    for candidate in candidates:
        own: dict[str, list[str]] = {}
        if not (measured and measured.field_needs(candidate.target, kinds, own, exact=True)):
            for method, fields in index.by_method(candidate.target, "cam").items():
                for field in fields:
                    name = field.split(PREFILL_ONLY, 1)[0]
                    owner = definer(index, candidate.target, method, "cam", name)
                    own.setdefault(f"{owner.name}.{method}", []).append(field)
        for consumer, fields in own.items():
            table.setdefault(consumer, []).extend(fields)
            reasons.setdefault(consumer, choice)
        choice.add(candidate, (f for fields in own.values() for f in fields))
