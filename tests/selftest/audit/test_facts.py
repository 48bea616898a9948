"""``audit --facts FILE``: stubs, construction sites and transformations judged by what the
real builders were seen to need; the facts' version must be the tree's."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from conformance.audit import Options, run_audit
from conformance.engines.facts import EngineFacts, write_facts

from engine_facts import make_facts

_TREE = runpy.run_path(str(Path(__file__).with_name("mechanism_tree.py")))
engine_files = _TREE["engine_files"]

SITE = """\
    from types import SimpleNamespace as NS

    from pkg.builders import ABuilder
    from pkg.record import CommonAttentionMetadata as CAM


    def make(cfg, pb, t, n):
        {body}
    """


def _errors(tmp_path, write_tree, body: str, facts: EngineFacts | None, **files):
    root = write_tree(
        tmp_path, {**engine_files(), "tests/test_site.py": SITE.replace("{body}", body), **files}
    )
    report = run_audit([root], options=Options(jobs=1), facts=facts)
    return [(f.code, f.names) for f in report.findings if f.severity == "error"], report


STUB = 'cfg.compilation_config.static_forward_context["l"] = {stub}\n        ABuilder(["l"], cfg)'


@pytest.mark.parametrize(
    ("stub", "static", "measured"),
    [
        # the measured builder needs kv_lora_rank: reported both ways
        (
            "NS(prefill_backend=pb)",
            [("STUB001", ("kv_lora_rank",))],
            [("STUB001", ("kv_lora_rank",))],
        ),
        # prefill_backend is read, but the real builder was never seen to need it
        ("NS(kv_lora_rank=1)", [("STUB001", ("prefill_backend",))], []),
    ],
)
def test_stubs_follow_what_the_builder_was_seen_to_require(
    tmp_path, write_tree, stub, static, measured
):
    body = STUB.replace("{stub}", stub)
    assert _errors(tmp_path / "s", write_tree, body, None)[0] == static
    found, report = _errors(tmp_path / "m", write_tree, body, make_facts())
    assert found == measured
    if measured:
        message = report.findings[0].message
        assert "A (measured)" in message and "A without kv_lora_rank: AttributeError" in message


@pytest.mark.parametrize(
    ("needed", "speculative", "expected"),
    [
        (("mixed",), False, [("CAM001", ("seq_lens_cpu_upper_bound",))]),
        ((), False, []),  # the builder never needed it
        (("mixed",), True, []),  # needed on mixed batches; the site builds decodes only
    ],
)
def test_construction_follows_the_batch_kinds_that_need_a_field(
    tmp_path, write_tree, needed, speculative, expected
):
    spec = "cfg.speculative_config = NS(num_speculative_tokens=1)\n        " if speculative else ""
    body = f"{spec}return ABuilder, CAM(t, n)"
    found, report = _errors(tmp_path, write_tree, body, make_facts(needed=needed))
    assert found == expected
    if expected:
        assert "A (measured on decode/mixed/prefill batches)" in report.findings[0].message


CALLER = """\
    from pkg.builders import {builder}
    from pkg.record import CommonAttentionMetadata


    class Runner:
        def __init__(self):
            self.drafter_builder = {builder}([], None)

        def step(self, cam: CommonAttentionMetadata, n):
            spec_cam = cam.unpadded(n)
            return self.drafter_builder.build(spec_cam)
    """


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        # the result reaches PlainBuilder, seen to need the field the facts saw dropped
        ("PlainBuilder", [("record.py", "CAM001", ("positions",))]),
        # it reaches ABuilder only, which was never seen to need it
        ("ABuilder", []),
    ],
)
def test_transformations_follow_what_was_seen_dropped(tmp_path, write_tree, builder, expected):
    keep = "\n            seq_lens_cpu_upper_bound=self.seq_lens_cpu_upper_bound,"
    caller = CALLER.replace("{builder}", builder)
    root = write_tree(tmp_path, {**engine_files(keep), "pkg/runner.py": caller})
    static = run_audit([root], options=Options(jobs=1))
    assert [f.code for f in static.findings if f.severity == "error"] == []
    measured = run_audit([root], options=Options(jobs=1), facts=make_facts())
    errors = [f for f in measured.findings if f.severity == "error"]
    assert [(Path(f.path).name, f.code, f.names) for f in errors] == expected
    if expected:
        assert "unpadded() was seen to drop positions" in errors[0].message
        assert "its result reaches the consumer named" in errors[0].message


def _tree_with_version(tmp_path, write_tree, version: str | None) -> Path:
    files = {**engine_files(), "tests/test_site.py": SITE.replace("{body}", "pass")}
    if version:
        files["PKG-INFO"] = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
    return write_tree(tmp_path, files)


def test_the_facts_version_must_be_the_trees(tmp_path, write_tree, run_cli):
    root = _tree_with_version(tmp_path / "t", write_tree, "1.2.3")
    good, other = tmp_path / "good.json", tmp_path / "other.json"
    write_facts(good, make_facts("1.2.3"))
    write_facts(other, make_facts("1.2.4"))
    status, _, err = run_cli(str(root), "--facts", str(good))
    assert status == 0, err
    status, out, err = run_cli(str(root), "--facts", str(other))
    assert status == 2 and out == ""
    [line] = err.strip().splitlines()
    assert "measured on vllm 1.2.4, the tree is vllm 1.2.3" in line


def test_an_unknown_tree_version_is_said_and_the_audit_proceeds(tmp_path, write_tree, run_cli):
    root = _tree_with_version(tmp_path / "t", write_tree, None)
    facts = tmp_path / "f.json"
    write_facts(facts, make_facts())
    status, _, err = run_cli(str(root), "--facts", str(facts), "--format", "json")
    assert status == 0
    assert "version is unknown" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a JSON facts file"),
        ('{"format": "x"}', "format 'x' is not"),
        (None, "sha256 does not match"),
    ],
)
def test_a_bad_facts_file_is_one_line_and_exit_2(tmp_path, write_tree, run_cli, text, message):
    root = _tree_with_version(tmp_path / "t", write_tree, "1.2.3")
    path = tmp_path / "f.json"
    if text is None:
        write_facts(path, make_facts())
        document = json.loads(path.read_text())
        document["version"] = "1.2.3-edited"
        path.write_text(json.dumps(document))
    else:
        path.write_text(text)
    status, out, err = run_cli(str(root), "--facts", str(path))
    assert status == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("audit: error: ") and message in line and str(path) in line
