"""Self-tests of the construction-site audit (`conformance.audit.construction`).

Each test builds a small source tree in tmp_path: the #40844 benchmark that left out
`seq_lens_cpu_upper_bound` must be reported, and its fixed version must not.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from conformance.audit import run_audit
from conformance.audit.construction import (
    audit_construction,
    definition_from_conformance,
    find_construction_sites,
    resolve_definition,
)
from conformance.audit.findings import Finding
from conformance.audit.tree import TreeParseError, load_tree
from conformance.metadata import record as metadata

# The nine fields without a default, as a #40844-era benchmark passed them.
REQUIRED_KWARGS = """\
        query_start_loc=qsl,
        query_start_loc_cpu=qsl_cpu,
        seq_lens=seq_lens,
        num_reqs=num_reqs,
        num_actual_tokens=num_tokens,
        max_query_len=max_q,
        max_seq_len=max_s,
        block_table_tensor=block_table,
        slot_mapping=slot_mapping,"""

BENCHMARK_40844 = f"""\
from vllm.v1.attention.backend import CommonAttentionMetadata


def _build_attention_metadata(qsl, qsl_cpu, seq_lens, seq_lens_cpu, num_reqs):
    common_attn_metadata = CommonAttentionMetadata(
{REQUIRED_KWARGS}
        _seq_lens_cpu=seq_lens_cpu,
    )
    return common_attn_metadata
"""

BENCHMARK_FIXED = f"""\
from vllm.v1.attention.backend import CommonAttentionMetadata


def _build_attention_metadata(qsl, qsl_cpu, seq_lens, seq_lens_cpu, num_reqs):
    return CommonAttentionMetadata(
{REQUIRED_KWARGS}
        seq_lens_cpu_upper_bound=seq_lens_cpu,
    )
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path → source) under `root`; return `root`."""
    for relpath, source in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


def construction_findings(root: Path) -> list[Finding]:
    """Findings of the construction audit over `root`, ordered by line."""
    findings = audit_construction(load_tree([root]))
    return sorted(findings, key=lambda f: (f.path, f.line, f.code))


def codes(findings: list[Finding]) -> list[str]:
    """The codes of `findings`, in order."""
    return [f.code for f in findings]


# ---------------------------------------------------------------------------- #40844


def test_benchmark_without_upper_bound_is_reported_with_field_and_site(tmp_path):
    write_tree(tmp_path, {"benchmarks/attention_benchmarks/mla_runner.py": BENCHMARK_40844})
    findings = construction_findings(tmp_path)
    missing = [f for f in findings if f.code == "CAM001"]
    assert len(missing) == 1, findings
    (finding,) = missing
    assert finding.kind == "missing"
    assert finding.names == ("seq_lens_cpu_upper_bound",)
    assert finding.path == str(tmp_path / "benchmarks/attention_benchmarks/mla_runner.py")
    assert finding.line == 5
    assert finding.qualname == "_build_attention_metadata"
    assert "seq_lens_cpu_upper_bound" in finding.message
    assert "#40844" in finding.message
    assert finding.to_text().startswith(f"{finding.path}:5: CAM001 ")


def test_fixed_benchmark_is_clean(tmp_path):
    write_tree(tmp_path, {"benchmarks/mla_runner.py": BENCHMARK_FIXED})
    assert construction_findings(tmp_path) == []


def test_deprecated_seq_lens_cpu_is_reported(tmp_path):
    write_tree(tmp_path, {"mla_runner.py": BENCHMARK_40844})
    deprecated = [f for f in construction_findings(tmp_path) if f.code == "CAM002"]
    assert len(deprecated) == 1
    assert deprecated[0].kind == "deprecated"
    assert deprecated[0].names == ("_seq_lens_cpu",)
    assert metadata.DEPRECATED_FIELDS["_seq_lens_cpu"] in deprecated[0].message


def test_literal_none_for_a_needed_field_counts_as_missing(tmp_path):
    source = BENCHMARK_FIXED.replace(
        "seq_lens_cpu_upper_bound=seq_lens_cpu", "seq_lens_cpu_upper_bound=None"
    )
    write_tree(tmp_path, {"runner.py": source})
    (finding,) = construction_findings(tmp_path)
    assert finding.code == "CAM001"
    assert finding.names == ("seq_lens_cpu_upper_bound",)
    assert "passes None" in finding.message


def test_unknown_keyword_is_invalid(tmp_path):
    source = BENCHMARK_FIXED.replace(
        "        seq_lens_cpu_upper_bound", "        seqlens=1,\n        seq_lens_cpu_upper_bound"
    )
    write_tree(tmp_path, {"runner.py": source})
    (finding,) = construction_findings(tmp_path)
    assert (finding.code, finding.kind, finding.names) == ("CAM004", "invalid", ("seqlens",))


# ---------------------------------------------------------------------------- definitions

TREE_DEFINITION = """\
from dataclasses import dataclass, field
from typing import ClassVar

from typing_extensions import deprecated


@dataclass
class CommonAttentionMetadata:
    query_start_loc: object
    seq_lens: object
    rswa_prefix_lens: object
    registry: ClassVar[dict] = {}
    causal: bool = True
    cache: object = field(init=False, default=None)
    _num_computed_tokens_cpu: object = None

    @property
    @deprecated("use seq_lens")
    def num_computed_tokens_cpu(self):
        return self._num_computed_tokens_cpu
"""


def test_tree_definition_with_extra_required_field_is_used(tmp_path):
    write_tree(
        tmp_path,
        {
            "vllm/v1/attention/backend.py": TREE_DEFINITION,
            "vllm/worker/runner.py": """\
                from vllm.v1.attention.backend import CommonAttentionMetadata

                def build(a, b):
                    return CommonAttentionMetadata(query_start_loc=a, seq_lens=b)

                def build_all(a, b, c):
                    return CommonAttentionMetadata(query_start_loc=a, seq_lens=b,
                                                   rswa_prefix_lens=c)
                """,
        },
    )
    findings = audit_construction(tmp_path)
    definition = resolve_definition(load_tree([tmp_path])).definition
    assert definition.source == f"{tmp_path / 'vllm/v1/attention/backend.py'}:8"
    assert definition.fields == (
        "query_start_loc",
        "seq_lens",
        "rswa_prefix_lens",
        "causal",
        "_num_computed_tokens_cpu",
    )
    # This definition has no seq_lens_cpu_upper_bound, so it is not needed here.
    assert definition.needed == ("query_start_loc", "seq_lens", "rswa_prefix_lens")
    assert [(f.code, f.qualname, f.names) for f in findings] == [
        ("CAM001", "build", ("rswa_prefix_lens",))
    ]
    assert "(required)" in findings[0].message


def test_tree_definition_detects_deprecated_backing_fields(tmp_path):
    write_tree(
        tmp_path,
        {
            "backend.py": TREE_DEFINITION,
            "spec_decode.py": """\
                from backend import CommonAttentionMetadata
                CommonAttentionMetadata(1, 2, 3, _num_computed_tokens_cpu=4)
                """,
        },
    )
    findings = construction_findings(tmp_path)
    assert [(f.code, f.names, f.qualname) for f in findings] == [
        ("CAM002", ("_num_computed_tokens_cpu",), "<module>")
    ]
    assert "num_computed_tokens_cpu" in findings[0].message


def test_our_definition_read_from_source_matches_the_dataclass():
    definition = definition_from_conformance()
    fields = [f for f in dataclasses.fields(metadata.CommonAttentionMetadata) if f.init]
    assert definition.fields == tuple(f.name for f in fields)
    assert definition.required == frozenset(metadata.REQUIRED_FIELDS)
    assert set(definition.needed) == set(metadata.BUILDER_REQUIRED_FIELDS)
    assert set(metadata.DEPRECATED_FIELDS) <= set(definition.deprecated)


def test_several_definitions_warn_and_use_the_first(tmp_path):
    write_tree(tmp_path, {"a/backend.py": TREE_DEFINITION, "b/backend.py": TREE_DEFINITION})
    tree = load_tree([tmp_path])
    findings = audit_construction(tree)
    definition = resolve_definition(tree).definition
    assert definition.source.endswith("a/backend.py:8")
    assert [(f.code, f.kind) for f in findings] == [("CAM005", "warning")]
    assert findings[0].path.endswith("b/backend.py")


# ---------------------------------------------------------------------------- call shapes

POSITIONAL = """\
from vllm.v1.attention.backend import CommonAttentionMetadata

def full(t):
    return CommonAttentionMetadata(t, t, t, 1, 1, 1, 1, t, t, seq_lens_cpu_upper_bound=t)

def short(t):
    return CommonAttentionMetadata(t, t, t, 1, 1, 1, 1, t, seq_lens_cpu_upper_bound=t)

def too_many(t):
    return CommonAttentionMetadata(t, t, t, 1, 1, 1, 1, t, t, True, t, t, t, t, t, t, t, t)
"""


def test_positional_arguments_fill_fields_in_order(tmp_path):
    write_tree(tmp_path, {"positional.py": POSITIONAL})
    findings = construction_findings(tmp_path)
    by_site = {f.qualname: f for f in findings}
    assert "full" not in by_site
    assert by_site["short"].names == ("slot_mapping",)
    assert by_site["too_many"].code == "CAM004"
    sites = {s.qualname: s for s in find_construction_sites(tmp_path)}
    assert sites["full"].passed[:3] == ("query_start_loc", "query_start_loc_cpu", "seq_lens")


ALIASES = """\
import vllm.v1.attention.backend as backend_mod
from vllm.v1.attention.backend import CommonAttentionMetadata as CAM
from vllm.v1.attention import backend

Alias = backend.CommonAttentionMetadata


class Runner:
    def build(self, t):
        return CAM(query_start_loc=t)


def outer(t):
    def inner():
        return backend_mod.CommonAttentionMetadata(query_start_loc=t)
    return inner


MODULE_LEVEL = Alias(query_start_loc=None)
"""


def test_aliases_and_attribute_calls_are_sites_with_qualnames(tmp_path):
    write_tree(tmp_path, {"pkg/aliases.py": ALIASES})
    sites = find_construction_sites(tmp_path)
    assert [(s.relpath, s.line, s.qualname) for s in sites] == [
        ("pkg/aliases.py", 10, "Runner.build"),
        ("pkg/aliases.py", 15, "outer.<locals>.inner"),
        ("pkg/aliases.py", 19, "<module>"),
    ]
    findings = construction_findings(tmp_path)
    assert [f.line for f in findings if f.code == "CAM001"] == [10, 15, 19]


KWARGS = """\
from vllm.v1.attention.backend import CommonAttentionMetadata

def opaque(kwargs):
    return CommonAttentionMetadata(**kwargs)

def opaque_but_complete(kwargs, t):
    return CommonAttentionMetadata(t, t, t, 1, 1, 1, 1, t, t, seq_lens_cpu_upper_bound=t,
                                   **kwargs)

def literal(t):
    return CommonAttentionMetadata(t, t, t, 1, 1, 1, 1, t, t,
                                   **{"seq_lens_cpu_upper_bound": t})

def starred(args):
    return CommonAttentionMetadata(*args)
"""


def test_unpacking_is_unverifiable_only_when_a_needed_field_is_not_given(tmp_path):
    write_tree(tmp_path, {"kw.py": KWARGS})
    findings = construction_findings(tmp_path)
    assert [(f.qualname, f.code, f.kind) for f in findings] == [
        ("opaque", "CAM003", "unverifiable"),
        ("starred", "CAM003", "unverifiable"),
    ]
    assert "cannot verify" in findings[0].message
    assert "seq_lens_cpu_upper_bound" in findings[0].names
    sites = {s.qualname: s for s in find_construction_sites(tmp_path)}
    assert sites["opaque"].unpacked and not sites["literal"].unpacked


def test_suppression_comment_silences_only_its_code(tmp_path):
    source = BENCHMARK_40844.replace(
        "CommonAttentionMetadata(", "CommonAttentionMetadata(  # conformance-audit: ignore[CAM001]"
    )
    write_tree(tmp_path, {"runner.py": source})
    assert codes(construction_findings(tmp_path)) == ["CAM002"]
    (site,) = find_construction_sites(tmp_path)
    assert site.ignored == {"CAM001"}


# ---------------------------------------------------------------------------- tree


def test_parse_failure_is_collected_and_the_rest_audited(tmp_path):
    write_tree(
        tmp_path,
        {"broken.py": "def f(:\n    pass\n", "benchmarks/mla_runner.py": BENCHMARK_40844},
    )
    tree = load_tree([tmp_path])
    (failure,) = tree.failures
    assert failure.path == str(tmp_path / "broken.py")
    assert failure.line == 1
    report = run_audit([tmp_path], audits=("construction",))
    assert report.exit_code == 2
    assert "CAM001" in codes(report.findings)
    with pytest.raises(TreeParseError, match=r"broken\.py"):
        find_construction_sites(tmp_path)
    assert len(find_construction_sites(tmp_path, strict=False)) == 1


def test_vendored_and_cache_folders_are_skipped(tmp_path):
    files = {
        f"{folder}/runner.py": BENCHMARK_40844
        for folder in (".git", ".nox/cpu", ".venv", "__pycache__", "env", "pkg.egg-info")
    }
    files["env/pyvenv.cfg"] = "home = /usr\n"
    write_tree(tmp_path, {**files, "src/runner.py": BENCHMARK_FIXED})
    tree = load_tree([tmp_path])
    assert [f.relpath for f in tree.files] == ["src/runner.py"]
    assert [f.relpath for f in load_tree([tmp_path], exclude=["src"]).files] == []


def test_paths_are_displayed_as_given(tmp_path, monkeypatch):
    write_tree(tmp_path, {"pkg/runner.py": BENCHMARK_40844})
    monkeypatch.chdir(tmp_path)
    (site,) = find_construction_sites(".")
    assert (site.path, site.relpath) == ("pkg/runner.py", "pkg/runner.py")
    (site,) = find_construction_sites("pkg")
    assert site.path == "pkg/runner.py" and site.relpath == "runner.py"


def test_this_repository_has_sites_and_every_one_has_a_qualname():
    root = Path(__file__).resolve().parents[2]
    sites = find_construction_sites(root)
    assert sites, "the suite builds CommonAttentionMetadata somewhere"
    assert all(s.qualname and not s.relpath.startswith("/") for s in sites)
