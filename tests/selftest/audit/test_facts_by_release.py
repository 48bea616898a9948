"""``audit --facts``: the tree's release read from every form a vLLM tree carries, and a
folder of per-release facts (``reports/engines/``) chosen by that release."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from conformance.engines.facts import write_facts
from conformance.engines.releases import MANIFEST, write_manifest

from engine_facts import make_facts

_TREE = runpy.run_path(str(Path(__file__).with_name("mechanism_tree.py")))
engine_files = _TREE["engine_files"]

SCM = "version: str\n__version__: str\n__version__ = version = '1.2.3'\n"


def _tree(tmp_path: Path, write_tree, version_file: str, text: str) -> Path:
    files = {**engine_files(), "vllm/__init__.py": "", version_file: text}
    files["benchmarks/bench.py"] = "pass\n"
    return write_tree(tmp_path / "tree", files)


@pytest.mark.parametrize(
    ("version_file", "text"),
    [
        ("vllm/_version.py", SCM),
        ("vllm/_version.py", "version = '1.2.3'\n"),
        ("vllm/_version.py", "__version_tuple__ = version_tuple = (1, 2, 3)\n"),
        ("vllm-1.2.3.dist-info/METADATA", "Name: vllm\nVersion: 1.2.3\n"),
    ],
)
@pytest.mark.parametrize("inside", ["", "benchmarks", "vllm"])
def test_a_real_tree_s_release_refuses_facts_of_another(
    tmp_path, write_tree, run_cli, version_file: str, text: str, inside: str
):
    root = _tree(tmp_path, write_tree, version_file, text)
    other = tmp_path / "other.json"
    write_facts(other, make_facts("1.2.4"))
    status, out, err = run_cli(str(root / inside), "--facts", str(other))
    assert status == 2 and out == "", err
    assert "measured on vllm 1.2.4, the tree is vllm 1.2.3" in err


def _folder(tmp_path: Path, *versions: str) -> Path:
    folder = tmp_path / "engines"
    folder.mkdir()
    names = []
    for version in versions:
        write_facts(folder / f"vllm-{version}.facts.json", make_facts(version))
        names.append(f"vllm-{version}.facts.json")
    write_manifest(folder, names)
    return folder


def test_a_folder_gives_the_facts_of_the_tree_s_release(tmp_path, write_tree, run_cli):
    root = _tree(tmp_path, write_tree, "vllm/_version.py", SCM)
    folder = _folder(tmp_path, "1.2.2", "1.2.3", "1.2.4")
    status, _, err = run_cli(str(root), "--facts", str(folder))
    assert status == 0, err
    assert f"judging vllm 1.2.3 (read from vllm/_version.py) by {folder}/vllm-1.2.3" in err


def test_a_folder_without_the_tree_s_release_says_so(tmp_path, write_tree, run_cli):
    root = _tree(tmp_path, write_tree, "vllm/_version.py", SCM)
    folder = _folder(tmp_path, "1.2.2", "1.2.4")
    status, _, err = run_cli(str(root), "--facts", str(folder))
    assert status == 0, err
    assert "no facts for vllm 1.2.3" in err and "measured there: 1.2.2, 1.2.4" in err
    assert "judged by the static rules" in err


def test_an_unknown_release_with_a_folder_says_so(tmp_path, write_tree, run_cli):
    root = write_tree(tmp_path / "tree", {**engine_files(), "vllm/__init__.py": ""})
    folder = _folder(tmp_path, "1.2.3")
    status, _, err = run_cli(str(root), "--facts", str(folder))
    assert status == 0, err
    assert "version is unknown, so no facts" in err


def test_a_facts_file_whose_checksum_differs_from_the_manifest_is_refused(
    tmp_path, write_tree, run_cli
):
    root = _tree(tmp_path, write_tree, "vllm/_version.py", SCM)
    folder = _folder(tmp_path, "1.2.3")
    lines = (folder / MANIFEST).read_text().replace("0", "1", 1)
    (folder / MANIFEST).write_text(lines)
    status, out, err = run_cli(str(root), "--facts", str(folder))
    assert status == 2 and out == ""
    [line] = err.strip().splitlines()
    assert "sha256 differs from" in line and "vllm-1.2.3.facts.json" in line
