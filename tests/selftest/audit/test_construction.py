"""Construction audit: each CAM rule fires on a broken site and not on its fixed twin."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.audit import Options, find_construction_sites, run_audit
from conformance.audit.construction import TreeParseError

REPO = Path(__file__).resolve().parents[3]
RECORD = """\
    from dataclasses import KW_ONLY, dataclass, field
    from typing import ClassVar


    @dataclass
    class CommonAttentionMetadata:
        query_start_loc: object
        num_reqs: int
        LIMIT: ClassVar[int] = 3
        cache: object = field(default=None, init=False)
        _: KW_ONLY
        seq_lens_cpu_upper_bound: object = None
        _seq_lens_cpu: object = None

        @property
        def seq_lens_cpu(self):
            import warnings

            warnings.warn("seq_lens_cpu", DeprecationWarning)
            return self._seq_lens_cpu
    """
BUILDER = """\
    from pkg.record import CommonAttentionMetadata


    class MLABuilder:
        def build(self, common_prefix_len, common_attn_metadata: CommonAttentionMetadata):
            bound = common_attn_metadata.seq_lens_cpu_upper_bound
            assert bound is not None
            return bound


    class PlainBuilder:
        def build(self, common_prefix_len, common_attn_metadata):
            if common_attn_metadata.seq_lens_cpu_upper_bound is not None:
                return common_attn_metadata.seq_lens_cpu_upper_bound.max()
            return common_attn_metadata.num_reqs
    """


def _audit(tmp_path, write_tree, site: str, where: str = "pkg/site.py") -> list[tuple[str, tuple]]:
    root = write_tree(tmp_path, {"pkg/record.py": RECORD, "pkg/builders.py": BUILDER, where: site})
    report = run_audit([root], options=Options(jobs=1))
    return sorted(
        (f.code, f.names) for f in report.findings if f.path.endswith(where.rsplit("/", 1)[-1])
    )


def _site(body: str, builder: str = "MLABuilder") -> str:
    return f"""\
        from pkg.builders import {builder}
        from pkg.record import CommonAttentionMetadata as CAM


        def make(t, n, **extra):
            {body}
            return {builder}
        """


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("return CAM(t, n, seq_lens_cpu_upper_bound=t)", []),
        ("return CAM(t, n)", [("CAM001", ("seq_lens_cpu_upper_bound",))]),
        ("return CAM(t, seq_lens_cpu_upper_bound=t)", [("CAM001", ("num_reqs",))]),
        (
            "return CAM(t, n, seq_lens_cpu_upper_bound=t, _seq_lens_cpu=t)",
            [("CAM002", ("_seq_lens_cpu",))],
        ),
        ("return CAM(t, n, **extra)", [("CAM003", ("seq_lens_cpu_upper_bound",))]),
        ("return CAM(t, n, seq_lens_cpu_upper_bound=t, **extra)", []),
        ("return CAM(t, n, **{'seq_lens_cpu_upper_bound': t})", []),
        ("return CAM(t, n, seq_lens_cpu_upper_bound=t, colour=1)", [("CAM004", ("colour",))]),
        ("return CAM(t, n, t, seq_lens_cpu_upper_bound=t)", [("CAM004", ())]),
        (
            "return CAM(t, n, seq_lens_cpu_upper_bound=None)",
            [("CAM001", ("seq_lens_cpu_upper_bound",))],
        ),
    ],
)
def test_each_rule_and_its_control(tmp_path, write_tree, body, expected):
    assert _audit(tmp_path, write_tree, _site(body)) == expected


def test_a_consumer_that_guards_the_field_does_not_need_it(tmp_path, write_tree):
    assert _audit(tmp_path, write_tree, _site("return CAM(t, n)", "PlainBuilder")) == []


def test_deliberate_none_in_a_test_is_a_lower_severity_finding(tmp_path, write_tree):
    site = _site("return CAM(t, n, seq_lens_cpu_upper_bound=None)")
    found = _audit(tmp_path, write_tree, site, where="tests/test_site.py")
    assert found == [("CAM006", ("seq_lens_cpu_upper_bound",))]


def test_a_site_reaching_no_consumer_is_checked_for_required_fields_only(tmp_path, write_tree):
    site = (
        "from pkg.record import CommonAttentionMetadata\n\n\n"
        "def f(t, n):\n    return CommonAttentionMetadata(t, n), CommonAttentionMetadata(t)\n"
    )
    assert _audit(tmp_path, write_tree, site) == [("CAM001", ("num_reqs",))]


SHARED = """\
    from pkg.builders import MLABuilder


    class MLA2Builder(MLABuilder):
        pass
    """


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        # every candidate runs MLABuilder.build: the field is needed whichever is chosen
        (
            'MLA = "pkg.builders.MLABuilder"\n            MLA2 = "pkg.shared.MLA2Builder"',
            [("CAM001", ("seq_lens_cpu_upper_bound",))],
        ),
        # one candidate of two needs it: whichever the caller picks may be that one
        (
            'MLA = "pkg.builders.MLABuilder"\n            PLAIN = "pkg.builders.PlainBuilder"',
            [("CAM001", ("seq_lens_cpu_upper_bound",))],
        ),
        # no candidate needs it
        ('PLAIN = "pkg.builders.PlainBuilder"', []),
    ],
)
def test_a_registry_enum_named_whole_is_judged_per_member(tmp_path, write_tree, members, expected):
    registry = f"""\
        import enum


        class BackendEnum(enum.Enum):
            {members}
        """
    site = """\
        from pkg.record import CommonAttentionMetadata
        from pkg.registry import BackendEnum


        def f(t, n, name):
            builder = BackendEnum[name]
            return builder, CommonAttentionMetadata(t, n)
        """
    root = write_tree(
        tmp_path,
        {
            "pkg/record.py": RECORD,
            "pkg/builders.py": BUILDER,
            "pkg/shared.py": SHARED,
            "pkg/registry.py": registry,
        },
    )
    write_tree(root, {"pkg/site.py": site})
    report = run_audit([root], options=Options(jobs=1))
    assert [(f.code, f.names) for f in report.findings] == expected
    if expected:
        message = report.findings[0].message
        assert "chosen at run time from BackendEnum (named in f): MLA" in message
        if "PLAIN" in members:
            assert message.endswith(
                "MLABuilder needs it (1 of the 2 consumers); fine for PlainBuilder)"
            )
        else:
            assert message.endswith("MLA2Builder and MLABuilder need it (2 of the 2 consumers))")


def test_a_call_resolving_to_another_class_is_not_a_site(tmp_path, write_tree):
    site = """\
        from other import Thing as CommonAttentionMetadata
        from pkg.record import CommonAttentionMetadata as Real


        class Local:
            CommonAttentionMetadata = None


        def f(t):
            CommonAttentionMetadata(t)
            Real.replace(t)
            return Local.CommonAttentionMetadata
        """
    assert _audit(tmp_path, write_tree, site) == []


def test_several_definitions_warn_and_sites_use_the_one_they_resolve_to(tmp_path, write_tree):
    other = RECORD.replace("num_reqs: int", "num_reqs: int\n        colour: int")
    root = write_tree(
        tmp_path,
        {
            "pkg/record.py": RECORD,
            "tests/fake_record.py": other,
            "tests/test_fake.py": (
                "from tests.fake_record import CommonAttentionMetadata\n\n\ndef f(t):\n"
                "    return CommonAttentionMetadata(t, 1, 2, seq_lens_cpu_upper_bound=t)\n"
            ),
        },
    )
    report = run_audit([root], options=Options(jobs=1))
    assert sorted(f.code for f in report.findings) == ["CAM005"], report.to_text()


def test_find_construction_sites_binds_positionals_and_is_strict(tmp_path, write_tree):
    root = write_tree(
        tmp_path,
        {"pkg/record.py": RECORD, "pkg/site.py": _site("return CAM(t, n)  # noqa: CAM001")},
    )
    [site] = find_construction_sites(root)
    assert site.passed == ("query_start_loc", "num_reqs") and site.qualname == "make"
    assert "CAM001" in site.ignored
    (root / "pkg" / "bad.py").write_text("static_forward_context = (\n")
    with pytest.raises(TreeParseError, match="syntax-error"):
        find_construction_sites(root)
    assert len(find_construction_sites(root, strict=False)) == 1


def test_this_repository_is_clean_and_every_site_has_a_qualname():
    sites = find_construction_sites(REPO)
    assert sites and all(s.qualname for s in sites)
    report = run_audit([REPO], options=Options(jobs=1))
    assert report.exit_code == 0 and not report.findings, report.to_text()
