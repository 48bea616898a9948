"""Hostile input: every bad file gives a clear message naming it, a non-PASS verdict, no crash,
and loses or overwrites no other report."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conformance.signoff.atomic import atomic_write_text
from conformance.signoff.engine import run_signoff
from conformance.signoff.model import Status, Verdict

from synthetic_reports import (
    SyntheticCase,
    junit_xml,
    node_ids,
    offline_options,
    write_backend,
)

IDS = node_ids("metadata", 12) + node_ids("stubs", 8)
BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol9 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
]>
<testsuites><testsuite name="mla-cpu"><testcase classname="a" name="&lol9;"/>
</testsuite></testsuites>
"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE t [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<testsuites><testsuite name="mla-cpu"><testcase classname="a" name="&secret;"/>
</testsuite></testsuites>
"""


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    """A reports dir holding a complete, passing, 2-way sharded cpu run."""
    write_backend(tmp_path / "reports" / "junit", "cpu", IDS, shards=2)
    return tmp_path / "reports"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_the_untouched_fixture_passes(reports: Path) -> None:
    result = run_signoff(offline_options(reports))
    assert result.verdict == Verdict.PASS
    assert result.backends["cpu"].status == Status.PASS


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (lambda good: good[: len(good) // 2], "not well-formed XML"),
        (lambda good: b"<testsuites><testsuite></testsuites>", "not well-formed XML"),
        (lambda good: b"", "is empty"),
        (lambda good: b"\x00\xff\xfe garbage \x80", "XML"),
        (lambda good: BILLION_LAUGHS.encode(), "entity-expansion bomb"),
        (lambda good: EXTERNAL_ENTITY.encode(), "DTD"),
        (lambda good: b"<html><body/></html>", "root element is <html>"),
        (lambda good: b"<testsuite><testcase classname='x'/></testsuite>", "has no name"),
    ],
    ids=[
        "truncated",
        "malformed",
        "empty",
        "binary",
        "entity-bomb",
        "external-entity",
        "wrong-root",
        "nameless-case",
    ],
)
def test_a_broken_shard_file_makes_the_backend_incomplete_and_is_named(
    reports: Path, content, fragment: str
) -> None:
    broken = reports / "junit" / "cpu-shard-2-of-2.xml"
    broken.write_bytes(content(broken.read_bytes()))
    other_inputs = snapshot(reports / "junit")
    started = time.monotonic()
    result = run_signoff(offline_options(reports))
    assert time.monotonic() - started < 5, "parsing hostile input must not blow up"
    assert result.verdict == Verdict.INCOMPLETE
    cpu = result.backends["cpu"]
    assert cpu.status == Status.INCOMPLETE
    named = [issue for issue in cpu.issues if str(broken) in issue and fragment in issue]
    assert named, cpu.issues
    assert any("cpu-shard-2-of-2.xml (unreadable)" in issue for issue in cpu.issues)
    shard_one = json.loads((reports / "junit" / "cpu-shard-1-of-2.meta.json").read_text())
    assert {case.node_id for case in cpu.cases} == set(shard_one["selected_ids"])
    assert snapshot(reports / "junit") == other_inputs, "inputs are never modified"
    merged = (reports / "conformance.xml").read_text()
    assert all(f'value="{node_id}"' in merged for node_id in shard_one["selected_ids"])
    assert "cpu-shard-2-of-2.xml" in (reports / "signoff.md").read_text()


def test_an_oversized_file_is_refused_before_it_is_read(reports: Path) -> None:
    result = run_signoff(offline_options(reports, max_bytes=200))
    assert result.verdict == Verdict.INCOMPLETE
    assert any("over the limit of 200 bytes" in issue for issue in result.backends["cpu"].issues)


def test_a_directory_with_a_report_name_is_refused(reports: Path) -> None:
    (reports / "junit" / "cpu-shard-2-of-2.xml").unlink()
    (reports / "junit" / "cpu-shard-2-of-2.xml").mkdir()
    result = run_signoff(offline_options(reports))
    assert result.verdict == Verdict.INCOMPLETE
    assert any("is not a regular file" in issue for issue in result.backends["cpu"].issues)


@pytest.mark.parametrize("name", ["metal.xml", "metal-shard-1-of-2.xml", "metal.meta.json"])
def test_a_file_from_an_unknown_backend_is_an_error_naming_it(reports: Path, name: str) -> None:
    path = reports / "junit" / name
    path.write_text(junit_xml([SyntheticCase(IDS[0])], suite_name="mla-metal"))
    result = run_signoff(offline_options(reports))
    assert result.verdict == Verdict.INCOMPLETE
    assert any(str(path) in error and "'metal' is unknown" in error for error in result.errors)
    assert result.backends["cpu"].status == Status.PASS, "other backends are still judged"
    assert "metal" not in result.backends
    assert any("metal" in line for line in result.blocking)


def test_a_file_with_an_unrecognised_name_is_an_error(reports: Path) -> None:
    path = reports / "junit" / "cpu-results.xml"
    path.write_text(junit_xml([SyntheticCase(IDS[0])]))
    result = run_signoff(offline_options(reports))
    assert result.verdict == Verdict.INCOMPLETE
    assert any(
        str(path) in error and "not a conformance JUnit name" in error for error in result.errors
    )


def test_two_shards_claiming_the_same_ids_are_duplicates(reports: Path) -> None:
    shard_one = reports / "junit" / "cpu-shard-1-of-2.xml"
    shard_two = reports / "junit" / "cpu-shard-2-of-2.xml"
    claimed = json.loads((reports / "junit" / "cpu-shard-1-of-2.meta.json").read_text())
    both = (
        claimed["selected_ids"][:3]
        + json.loads((reports / "junit" / "cpu-shard-2-of-2.meta.json").read_text())["selected_ids"]
    )
    shard_two.write_text(junit_xml([SyntheticCase(node_id) for node_id in both]))
    result = run_signoff(offline_options(reports))
    assert result.verdict == Verdict.INCOMPLETE
    cpu = result.backends["cpu"]
    assert set(cpu.completeness.duplicates) == set(claimed["selected_ids"][:3])
    assert all(
        files == [shard_one.name, shard_two.name] for files in cpu.completeness.duplicates.values()
    )
    assert any("3 ids reported more than once" in issue for issue in cpu.issues)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "is not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "is not valid JSON"),
        ('["a list"]', "is not a JSON object"),
        ('{"format": "something-else/9"}', "format is 'something-else/9'"),
        ('{"format": "mla-conformance-run/1", "collected_ids": "all"}', "'collected_ids'"),
    ],
    ids=["truncated", "deeply-nested", "not-object", "wrong-format", "bad-field"],
)
def test_a_broken_sidecar_is_named_and_blocks_pass(
    reports: Path, content: str, fragment: str
) -> None:
    sidecar = reports / "junit" / "cpu-shard-1-of-2.meta.json"
    sidecar.write_text(content)
    result = run_signoff(offline_options(reports))
    assert result.verdict == Verdict.INCOMPLETE
    issues = result.backends["cpu"].issues
    assert any(str(sidecar) in issue and fragment in issue for issue in issues), issues


def test_reports_are_replaced_whole(reports: Path) -> None:
    (reports / "signoff.md").write_text("an old sign-off\n")
    run_signoff(offline_options(reports))
    assert (reports / "signoff.md").read_text().startswith("# MLA conformance sign-off: PASS")
    assert not [path for path in reports.iterdir() if path.name.endswith(".tmp")]


def test_an_interrupted_write_keeps_the_old_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "signoff.md"
    target.write_text("old and whole\n")

    def fail(_descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(target, "new" * 1000)
    assert target.read_text() == "old and whole\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["signoff.md"]


# --- the cases the sign-off's issue measured --------------------------------------------------


def nested_testcase(depth: int) -> str:
    """A JUnit file with ``depth`` nested elements inside one testcase (64 KB at 1,100)."""
    inner = "<a>" * depth + "</a>" * depth
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="mla-cpu" tests="1">'
        f'<testcase classname="tests.conformance.test_metadata" name="test_case[0]">{inner}'
        "</testcase></testsuite></testsuites>"
    )


@pytest.mark.parametrize("depth", [1_100, 200_000])
def test_a_deeply_nested_report_is_refused_in_bounded_time(reports: Path, depth: int) -> None:
    run_signoff(offline_options(reports))  # an earlier PASS on disk
    (reports / "junit" / "cpu-shard-1-of-2.xml").write_text(nested_testcase(depth))
    started = time.monotonic()
    result = run_signoff(offline_options(reports))
    assert time.monotonic() - started < 10
    assert result.verdict == Verdict.INCOMPLETE
    assert any(
        "cpu-shard-1-of-2.xml: nests elements more than 16 deep" in issue
        for issue in result.backends["cpu"].issues
    )
    assert (reports / "signoff.md").read_text().startswith("# MLA conformance sign-off: INCOMPLETE")
    assert json.loads((reports / "signoff.json").read_text())["verdict"] == "INCOMPLETE"


def test_a_report_from_another_tool_is_named(reports: Path) -> None:
    jest = (
        '<?xml version="1.0"?><testsuites name="jest tests" tests="1">'
        '<testsuite name="math" tests="1"><testcase classname="adds" name="adds 1 + 2"/>'
        "</testsuite></testsuites>"
    )
    (reports / "junit" / "cpu-shard-2-of-2.xml").write_text(jest)
    result = run_signoff(offline_options(reports, write=False))
    cpu = result.backends["cpu"]
    assert cpu.status == Status.INCOMPLETE
    assert any("JUnit suite named math, the file name says 'mla-cpu'" in i for i in cpu.issues)


def test_an_unreadable_report_is_named(reports: Path, monkeypatch) -> None:
    victim = reports / "junit" / "cpu-shard-1-of-2.xml"
    real_open = open

    def guarded_open(path, *args, **kwargs):
        if Path(path) == victim:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("conformance.signoff.loading.open", guarded_open, raising=False)
    result = run_signoff(offline_options(reports, write=False))
    assert result.verdict == Verdict.INCOMPLETE
    assert any(
        f"{victim}: cannot be read: Permission denied" in i for i in result.backends["cpu"].issues
    )


def test_a_fifo_with_a_report_name_is_refused_without_blocking(reports: Path) -> None:
    fifo = reports / "junit" / "cpu-shard-1-of-2.xml"
    fifo.unlink()
    os.mkfifo(fifo)
    result = run_signoff(offline_options(reports, write=False))
    assert any(f"{fifo}: is not a regular file" in i for i in result.backends["cpu"].issues)


def test_a_huge_report_of_tiny_testcases_is_refused_in_bounded_time(reports: Path) -> None:
    case = '<testcase classname="tests.conformance.test_metadata" name="t{}"/>'
    body = "".join(case.format(index) for index in range(120_000))
    path = reports / "junit" / "cpu-shard-1-of-2.xml"
    path.write_text(f'<testsuites><testsuite name="mla-cpu">{body}</testsuite></testsuites>')
    started = time.monotonic()
    result = run_signoff(offline_options(reports, write=False))
    assert time.monotonic() - started < 20
    assert any(
        f"{path}: holds more than 100000 testcases" in i for i in result.backends["cpu"].issues
    )
