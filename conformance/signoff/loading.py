"""Reading untrusted report files safely: size limits, defusedxml, strict shape checks.

Every failure is a `SignoffInputError` that names the file; nothing here raises anything else
for bad input, so one broken file can never stop the sign-off of the others.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element, ParseError

from conformance.runs.names import Shard
from conformance.runs.record import SIDECAR_FORMAT_PREFIX
from conformance.signoff.errors import SignoffInputError
from conformance.signoff.model import CaseResult, Outcome, RunReport

MAX_JUNIT_BYTES = 16 * 1024 * 1024  # the suite's own reports are ~100 KB
MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_DETAIL_CHARS = 4000
MAX_TESTCASES = 100_000
MAX_XML_DEPTH = 16  # pytest nests 5 deep (testsuites/testsuite/testcase/properties/property)
TEARDOWN_PREFIX = "failed on teardown"
XFAIL_TYPE = "pytest.xfail"


def read_bounded(path: Path, *, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise SignoffInputError(path, "is not a regular file")
        if info.st_size > limit:
            raise SignoffInputError(
                path, f"is {info.st_size} bytes, over the limit of {limit} bytes"
            )
        with open(path, "rb") as stream:
            data = stream.read(limit + 1)
    except OSError as error:
        raise SignoffInputError(path, f"cannot be read: {error.strerror or error}") from None
    if len(data) > limit:
        raise SignoffInputError(path, f"grew past the limit of {limit} bytes while being read")
    if not data.strip():
        raise SignoffInputError(path, "is empty (the run was killed while writing it?)")
    return data


def parse_xml(path: Path, data: bytes) -> Element:
    """Parse JUnit XML with defusedxml: no DTD, no entities, no external references.

    defusedxml is imported here, not with the module, so that ``signoff --help`` works where
    it is missing (the command itself then says so: `conformance.signoff.cli`)."""
    from defusedxml import DefusedXmlException, DTDForbidden, EntitiesForbidden
    from defusedxml.ElementTree import fromstring as safe_fromstring

    try:
        root = safe_fromstring(data, forbid_dtd=True)
    except DTDForbidden:
        raise SignoffInputError(
            path,
            "declares a DTD (<!DOCTYPE ...>); JUnit reports have none, and a DTD can carry an "
            "entity-expansion bomb, so the file is refused",
        ) from None
    except EntitiesForbidden:
        raise SignoffInputError(
            path, "declares XML entities (an entity-expansion bomb?); the file is refused"
        ) from None
    except DefusedXmlException as error:
        raise SignoffInputError(path, f"uses a forbidden XML feature: {error}") from None
    except ParseError as error:
        raise SignoffInputError(
            path, f"is not well-formed XML ({error}); truncated or corrupted?"
        ) from None
    except (ValueError, RecursionError) as error:
        raise SignoffInputError(path, f"cannot be parsed as XML: {error}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise SignoffInputError(
            path, f"root element is <{root.tag}>, not <testsuites> or <testsuite>"
        )
    depth = xml_depth(root, limit=MAX_XML_DEPTH)
    if depth > MAX_XML_DEPTH:
        raise SignoffInputError(
            path,
            f"nests elements more than {MAX_XML_DEPTH} deep (pytest's JUnit nests 5); "
            "the file is refused",
        )
    return root


def xml_depth(root: Element, *, limit: int) -> int:
    """The nesting depth of ``root`` (iterative; stops counting past ``limit``)."""
    deepest, stack = 1, [(root, 1)]
    while stack:
        element, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > limit:
            return depth
        stack.extend((child, depth + 1) for child in element)
    return deepest


def node_id_from_junit(classname: str, name: str) -> str:
    """Rebuild a pytest node id from JUnit ``classname`` and ``name`` (best effort).

    ``tests.conformance.test_stubs.TestX`` + ``test_y[a]`` →
    ``tests/conformance/test_stubs.py::TestX::test_y[a]``. Used only when a testcase lacks
    the ``nodeid`` property the report plugin records.
    """
    if not classname:
        return name
    parts = classname.split(".")
    module_end = max(
        (index for index, part in enumerate(parts) if part[:1].islower() or part[:1] == "_"),
        default=len(parts) - 1,
    )
    module = "/".join(parts[: module_end + 1]) + ".py"
    return "::".join([module, *parts[module_end + 1 :], name])


ENGINE_FAMILIES: dict[str, str] = {"family_a": "metadata", "family_b": "stubs", "family_c": "plan"}
"""An engine target's family modules (``tests/engines/<engine>/test_family_a.py``) → the column
of the shared test set they run on the engine's own code: A metadata construction, B layer
stubs, C persistent-decode plans (with its fp8 golden decodes)."""


def family_of_node_id(node_id: str) -> str:
    """``tests/conformance/test_stubs.py::test_x`` → ``stubs``; ``other`` when not a test module;
    an engine's ``test_family_a.py`` → its shared family (`ENGINE_FAMILIES`)."""
    module = node_id.split("::", 1)[0].rsplit("/", 1)[-1]
    if module.startswith("test_") and module.endswith(".py"):
        name = module.removeprefix("test_").removesuffix(".py")
        return ENGINE_FAMILIES.get(name, name)
    return "other"


def _raw_outcome(testcase: Element) -> tuple[Outcome, str, str]:
    outcome, message, detail = Outcome.PASSED, "", ""
    for child in testcase:
        if child.tag == "error":
            candidate = Outcome.ERROR
        elif child.tag == "failure":
            candidate = Outcome.FAILED
        elif child.tag == "skipped":
            is_xfail = (child.get("type") or "") == XFAIL_TYPE
            candidate = Outcome.XFAIL if is_xfail else Outcome.SKIPPED
        else:
            continue
        if candidate.severity >= outcome.severity:
            outcome = candidate
            message = child.get("message") or ""
            detail = (child.text or "")[:MAX_DETAIL_CHARS]
    return outcome, message, detail


def _properties(element: Element) -> dict[str, str]:
    found: dict[str, str] = {}
    for prop in element.findall("properties/property"):
        name = prop.get("name")
        if name:
            found.setdefault(name, prop.get("value") or "")
    return found


def _is_teardown_pair(first: CaseResult, second: CaseResult) -> bool:
    """pytest's one legitimate repeat: a failed call, then its teardown error."""
    return (
        not first.duplicated
        and first.outcome in (Outcome.FAILED, Outcome.ERROR)
        and second.outcome == Outcome.ERROR
        and second.message.startswith(TEARDOWN_PREFIX)
    )


def _merge_case(first: CaseResult, second: CaseResult) -> CaseResult:
    """One id twice in one file: pytest's teardown pair is merged; anything else is marked."""
    worst, other = (
        (second, first)
        if second.outcome.severity > first.outcome.severity
        else (
            first,
            second,
        )
    )
    message = worst.message
    if other.outcome != Outcome.PASSED and other.message and other.message != message:
        message = f"{message}; {other.outcome.value}: {other.message}"
    properties = {**other.properties, **worst.properties}
    return CaseResult(
        worst.node_id,
        worst.family,
        worst.outcome,
        message,
        worst.detail,
        properties,
        first.time + second.time,
        worst.source,
        duplicated=first.duplicated or not _is_teardown_pair(first, second),
    )


def cases_of(root: Element, *, path: Path) -> list[CaseResult]:
    """The test cases of a parsed JUnit document, one per node id."""
    by_id: dict[str, CaseResult] = {}
    for index, testcase in enumerate(root.iter("testcase")):
        if index >= MAX_TESTCASES:
            raise SignoffInputError(
                path, f"holds more than {MAX_TESTCASES} testcases; the file is refused"
            )
        name = testcase.get("name")
        if not name:
            raise SignoffInputError(path, f"testcase #{index + 1} has no name attribute")
        properties = _properties(testcase)
        node_id = properties.get("nodeid") or node_id_from_junit(
            testcase.get("classname") or "", name
        )
        try:
            time = float(testcase.get("time") or 0.0)
        except ValueError:
            time = 0.0
        family = properties.get("family") or family_of_node_id(node_id)
        # _raw_outcome gives the next three fields: outcome, message, detail
        case = CaseResult(node_id, family, *_raw_outcome(testcase), properties, time, path.name)
        previous = by_id.get(node_id)
        by_id[node_id] = case if previous is None else _merge_case(previous, case)
    return list(by_id.values())


def load_sidecar(path: Path) -> dict[str, Any]:
    """A run sidecar (``*.meta.json``), checked for the fields the sign-off reads."""
    document = load_json_object(path)
    file_format = document.get("format")
    if not isinstance(file_format, str) or not file_format.startswith(SIDECAR_FORMAT_PREFIX):
        raise SignoffInputError(
            path, f"format is {file_format!r}, expected '{SIDECAR_FORMAT_PREFIX}<n>'"
        )
    for key in ("collected_ids", "selected_ids"):
        value = document.get(key)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(item, str) for item in value)
        ):
            raise SignoffInputError(path, f"field {key!r} is not a list of node id strings")
    for key in ("backend", "shard", "run_id", "junit", "junit_sha256", "device_kind"):
        value = document.get(key)
        if value is not None and not isinstance(value, str):
            raise SignoffInputError(path, f"field {key!r} is {value!r}, expected a string")
    return document


def load_json_object(path: Path) -> dict[str, Any]:
    """Any small JSON object (a sidecar, evidence ``versions.json``, a baseline)."""
    data = read_bounded(path, limit=MAX_JSON_BYTES)
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise SignoffInputError(path, f"is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise SignoffInputError(path, "is not a JSON object")
    return document


def load_run(
    path: Path,
    *,
    backend: str,
    shard: Shard | None,
    sidecar: dict[str, Any] | None,
    sidecar_path: Path | None,
    limit: int = MAX_JUNIT_BYTES,
) -> RunReport:
    """Read one JUnit file into a `RunReport`; raise `SignoffInputError` naming it."""
    data = read_bounded(path, limit=limit)
    root = parse_xml(path, data)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    first_suite = suites[0] if suites else None
    declared: int | None = None
    try:
        declared = sum(int(suite.get("tests") or "") for suite in suites) if suites else None
    except ValueError:
        declared = None
    return RunReport(
        path=path,
        backend=backend,
        shard=shard,
        cases=cases_of(root, path=path),
        suite_name=None if first_suite is None else first_suite.get("name"),
        suite_properties={} if first_suite is None else _properties(first_suite),
        sidecar=sidecar,
        sidecar_path=sidecar_path,
        root=root,
        declared_tests=declared,
        sha256=hashlib.sha256(data).hexdigest(),
    )
