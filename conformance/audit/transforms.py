"""Transformations of the record: methods of the record class (vLLM's
``CommonAttentionMetadata``) that rebuild it (``unpadded()``, a slicing helper). A field
such a rebuild leaves out is lost for whoever receives the new record, so a transformation
the tree calls is judged against the consumers its result reaches (`receivers`); an
uncalled one is checked for the required fields only.
"""

from __future__ import annotations

from conformance.audit.index import Index
from conformance.audit.sites import EngineSites


def transformation(qualname: str, sites: EngineSites) -> str | None:
    """The method name when `qualname` is a method of the record class itself."""
    head, _, rest = qualname.partition(".")
    return rest.split(".", 1)[0] if head == sites.record and rest else None


def callers(index: Index, method: str) -> list[str]:
    """The core files (not tests or benchmarks) that call ``x.method(...)``."""
    return [
        index.entries[number].relpath
        for number, facts in index.loaded()
        if method in facts.get("called", ()) and not index.entries[number].is_support
    ]
