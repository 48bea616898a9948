"""The README is a front door and the manual lives in ``docs/``: the README stays short, links
every page of ``docs/``, keeps the test command CI runs, and every relative link of the README
and of ``docs/*.md`` names a file that exists and, with ``#anchor``, a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 150

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6} (.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without fenced blocks and inline code, where a bracket is no link."""
    return _CODE.sub("", _FENCE.sub("", text))


def links(path: Path) -> list[str]:
    """Every link target of a Markdown file, in order."""
    return _LINK.findall(_prose(path.read_text(encoding="utf-8")))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated one is numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` whose file or heading does not exist, with the reason."""
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(f"{target}: no heading with this anchor in {linked.name}")
    return broken


def test_slug_follows_github() -> None:
    assert slug("Engine target: vLLM") == "engine-target-vllm"
    assert slug("`nox -s vllm`") == "nox--s-vllm"
    assert slug("1. What a backend declares") == "1-what-a-backend-declares"


def test_a_broken_link_is_named(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#a-section) [self](#page) `[code](nowhere.md)`\n"
        "[gone](missing.md) [no heading](other.md#nope)\n\n```\n[fenced](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nope: no heading with this anchor in other.md",
    ]


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_readme_links_every_docs_page() -> None:
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in links(README)}
    assert [page.name for page in PAGES if page.resolve() not in linked] == []


def test_readme_keeps_the_test_command_ci_runs() -> None:
    ci_runs = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.startswith("python3 -m nox -s lint")
    ]
    assert ci_runs == ["python3 -m nox -s lint tests"]
    command = "python3 -m pip install -r requirements/tools.txt && " + ci_runs[0]
    assert command in README.read_text(encoding="utf-8").splitlines()
