"""Configuration: select / ignore / per-file-ignores, severities, fail-on, noqa, pyproject."""

from __future__ import annotations

import json

import pytest

from conformance.audit import Config, ConfigError, Options, load_config, run_audit
from conformance.audit.config import merge

TREE = {
    "pkg/record.py": """\
        from dataclasses import dataclass


        @dataclass
        class CommonAttentionMetadata:
            num_reqs: int
            _seq_lens_cpu: object = None

            @property
            def seq_lens_cpu(self):
                \"\"\"Deprecated: use seq_lens.\"\"\"
                return self._seq_lens_cpu
        """,
    "pkg/core.py": """\
        from pkg.record import CommonAttentionMetadata


        def build(n, s):
            return CommonAttentionMetadata(n, _seq_lens_cpu=s)


        def broken():
            return CommonAttentionMetadata()
        """,
    "tests/test_x.py": """\
        from pkg.record import CommonAttentionMetadata


        def test_broken():
            return CommonAttentionMetadata()  # noqa: CAM001
        """,
}


def _codes(report) -> list[tuple[str, str, str]]:
    return sorted((f.path.rsplit("/", 1)[-1], f.code, f.severity) for f in report.findings)


def test_defaults_deprecated_is_a_warning_and_noqa_silences(tmp_path, write_tree):
    root = write_tree(tmp_path, TREE)
    report = run_audit([root], options=Options(jobs=1))
    assert _codes(report) == [("core.py", "CAM001", "error"), ("core.py", "CAM002", "warning")]
    assert report.suppressed == 1 and report.exit_code == 1


def test_select_ignore_and_per_file_ignores(tmp_path, write_tree):
    root = write_tree(tmp_path, TREE)
    only_deprecated = Config(select=("CAM002",))
    assert _codes(run_audit([root], config=only_deprecated, options=Options(jobs=1))) == [
        ("core.py", "CAM002", "warning")
    ]
    ignored = Config(ignore=("CAM00",), select=("ALL", "CAM002"))  # longest selector wins
    assert [
        c for _, c, _ in _codes(run_audit([root], config=ignored, options=Options(jobs=1)))
    ] == ["CAM002"]
    per_file = Config(per_file_ignores={"pkg/core.py": ("CAM001",)}, root=str(root))
    report = run_audit([root], config=per_file, options=Options(jobs=1))
    assert _codes(report) == [("core.py", "CAM002", "warning")] and report.exit_code == 0


def test_severity_and_fail_on_set_the_exit_code(tmp_path, write_tree):
    root = write_tree(tmp_path, TREE)
    demoted = Config(severity={"CAM001": "info"})
    assert run_audit([root], config=demoted, options=Options(jobs=1)).exit_code == 0
    strict = Config(severity={"CAM001": "info"}, fail_on="warning")
    assert run_audit([root], config=strict, options=Options(jobs=1)).exit_code == 1
    assert (
        run_audit(
            [root],
            config=Config(fail_on="info", severity={"CAM001": "info", "CAM002": "info"}),
            options=Options(jobs=1),
        ).exit_code
        == 1
    )


def test_bare_noqa_silences_every_code_and_legacy_comment_still_works(tmp_path, write_tree):
    files = dict(TREE)
    files["pkg/core.py"] = (
        TREE["pkg/core.py"]
        .replace("_seq_lens_cpu=s)", "_seq_lens_cpu=s)  # noqa")
        .replace(
            "CommonAttentionMetadata()\n",
            "CommonAttentionMetadata()  # conformance-audit: ignore[CAM001]\n",
        )
    )
    report = run_audit([write_tree(tmp_path, files)], options=Options(jobs=1))
    assert report.findings == [] and report.suppressed == 3


def test_pyproject_table_is_found_and_read(tmp_path, write_tree, run_cli):
    root = write_tree(tmp_path, TREE)
    (root / "pyproject.toml").write_text(
        '[tool.mla-conformance.audit]\nignore = ["CAM002"]\n'
        '[tool.mla-conformance.audit.per-file-ignores]\n"pkg/core.py" = ["CAM001"]\n'
    )
    status, out, _ = run_cli(str(root), "--format", "json", config=True)
    document = json.loads(out)
    assert status == 0 and document["findings"] == [], out
    assert document["config"]["source"].endswith("pyproject.toml")
    status, _, _ = run_cli(str(root), "--format", "json")  # --no-config
    assert status == 1


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"select": ["XYZ"]}, "'XYZ' matches no rule"),
        ({"severity": {"CAM001": "fatal"}}, "expected a rule code and one of"),
        ({"fail-on": "never"}, "fail-on"),
        ({"max-file-size": -1}, "max-file-size"),
        ({"per-file-ignores": ["x"]}, "per-file-ignores"),
    ],
)
def test_bad_values_name_the_key(table, fragment):
    with pytest.raises(ConfigError, match=fragment):
        merge(Config(), table, "pyproject.toml")


def test_unknown_key_and_bad_toml_name_the_file(tmp_path, run_cli):
    bad = tmp_path / "pyproject.toml"
    bad.write_text("[tool.mla-conformance.audit]\nselct = []\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(str(bad))
    bad.write_text("[tool.mla-conformance.audit\n")
    status, _, err = run_cli(str(tmp_path), "--config", str(bad), config=True)
    assert status == 2 and "not valid TOML" in err


def test_cli_options_override(tmp_path, write_tree, run_cli):
    root = write_tree(tmp_path, TREE)
    status, out, _ = run_cli(str(root), "--ignore", "CAM001")
    assert status == 0 and "CAM002" in out
    status, out, _ = run_cli(str(root), "--per-file-ignores", "*/core.py:CAM")
    assert status == 0 and out == ""
    status, _, _ = run_cli(str(root), "--severity", "CAM002=error", "--ignore", "CAM001")
    assert status == 1
    status, _, err = run_cli(str(root), "--per-file-ignores", "nocolon")
    assert status == 2 and "GLOB:CODES" in err
