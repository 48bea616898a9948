"""Transformations of the record: methods of ``CommonAttentionMetadata`` that rebuild it
(``unpadded()``, a slicing helper). A field such a rebuild leaves out is lost for every
builder the new record reaches, so a transformation the tree calls is judged against what
the builders' ``build`` methods (the entry point the engine calls with a record) need; an
uncalled one is not judged.
"""

from __future__ import annotations

from conformance.audit.index import Index, Target
from conformance.audit.usage import CAM_NAME, PREFILL_ONLY

ENTRY = "build"


def transformation(qualname: str) -> str | None:
    """The method name when `qualname` is a method of the record class itself."""
    head, _, rest = qualname.partition(".")
    return rest.split(".", 1)[0] if head == CAM_NAME and rest else None


def callers(index: Index, method: str) -> list[str]:
    """The core files (not tests or benchmarks) that call ``x.method(...)``."""
    return [
        index.entries[number].relpath
        for number, facts in index.loaded()
        if method in facts.get("called", ()) and not index.entries[number].is_support
    ]


def transformation_needs(
    index: Index, method: str
) -> tuple[dict[str, list[str]], list[str]] | None:
    """``Builder.build`` → the fields it needs, for every builder of the tree, and why
    (the files calling the transformation); None when no core file calls it."""
    called_in = callers(index, method)
    if not called_in:
        return None
    table: dict[str, list[str]] = {}
    for number, facts in index.loaded():
        module = (index.names_of[number] or [""])[0]
        for name, info in facts["classes"].items():
            fields = info["cam"].get(ENTRY)
            if fields:
                table[f"{Target('class', module, name).name}.{ENTRY}"] = [
                    f.split(PREFILL_ONLY, 1)[0] for f in fields
                ]
    shown = ", ".join(called_in[:2]) + (
        f" and {len(called_in) - 2} more" if len(called_in) > 2 else ""
    )
    return table, [f"{CAM_NAME}.{method}() is a transformation of the record, called in {shown}"]
