"""The pieces of the `vllm_gpu` engine target that run without vLLM or a GPU.

Stand-ins are written only for what is missing and refuse every call naming themselves;
a CUDA-graph batch is padded as vLLM's runner pads it; a known finding's pattern names the
tests it means and no other; the engine sessions refuse an environment holding a
distribution the suite's packages shadow; the bundle carries only what vLLM imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conformance.engines.target import finding_matches
from conformance.engines.vllm import extensions
from conformance.metadata.batch import BatchSpec, make_cam

ROOT = Path(__file__).resolve().parents[3]


def _run(code: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_stand_ins_are_written_for_the_missing_modules_only(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "vllm" / "vllm_flash_attn").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "vllm_flash_attn" / "__init__.py").write_text("raise ImportError('no')\n")
    (site / "vllm" / "_moe_C_stable_libtorch.abi3.so").write_bytes(b"")  # present: kept
    code = (
        "import sys; from pathlib import Path\n"
        "from conformance.engines.vllm.extensions import write_standins, stood_in\n"
        f"print(write_standins(Path({str(site)!r}))); print(stood_in())"
    )
    result = _run(code, site)
    assert result.returncode == 0, result.stderr
    written = ["vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa2_C", "llguidance"]
    assert result.stdout.splitlines() == [str(written), str(written)]
    assert (site / "vllm" / "_C_stable_libtorch.py").is_file()
    assert (site / "llguidance" / "__init__.py").is_file()
    assert not (site / "vllm" / "_moe_C_stable_libtorch.py").exists()


def test_a_stand_in_refuses_every_call_naming_itself(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    extensions_code = (
        "from pathlib import Path\n"
        "from conformance.engines.vllm.extensions import write_standins\n"
        f"write_standins(Path({str(tmp_path)!r}))\n"
        "import vllm._C_stable_libtorch as c, llguidance.api.deep as d\n"
        "for call in (lambda: c.concat_and_cache_mla(1), lambda: d.Grammar()):\n"
        "    try:\n"
        "        call()\n"
        "    except RuntimeError as error:\n"
        "        print(type(error).__name__, error)\n"
    )
    result = _run(extensions_code, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("StoodInError") for line in lines)
    assert "vllm._C_stable_libtorch.concat_and_cache_mla was called" in lines[0]
    assert "llguidance.api.deep.Grammar was called" in lines[1]


def test_nothing_is_stood_in_where_the_modules_exist(tmp_path: Path) -> None:
    for name in extensions.STANDINS:
        path = extensions.stand_in_path(name, tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".abi3.so").write_bytes(b"") if path.name != "__init__.py" else (
            path.write_text("")
        )
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "vllm_flash_attn" / "__init__.py").write_text("")
    code = (
        "from pathlib import Path\nfrom conformance.engines.vllm.extensions import "
        f"write_standins, stood_in\nprint(write_standins(Path({str(tmp_path)!r})), stood_in())"
    )
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] []"


def test_a_padded_batch_is_padded_as_vllm_s_runner_pads_it() -> None:
    from conformance.engines.vllm.decode import as_vllm_pads

    cam = make_cam(BatchSpec((9, 5, 0), (2, 2, 0), "padded"), block_size=16, decode_threshold=2)
    padded = as_vllm_pads(cam)
    assert padded.num_actual_tokens == 6 and cam.num_actual_tokens == 4
    assert padded.slot_mapping[4:].tolist() == [-1, -1]
    assert padded.query_start_loc_cpu.tolist() == cam.query_start_loc_cpu.tolist() == [0, 2, 4, 4]
    unpadded = make_cam(BatchSpec((9, 5), (2, 2), "full"), block_size=16, decode_threshold=2)
    assert as_vllm_pads(unpadded) is unpadded


def test_a_non_causal_batch_is_fed_only_to_an_implementation_that_takes_one() -> None:
    """vLLM's builder refuses a non-causal multi-token decode unless its class supports one
    and the group's layers ask for it; the GPU tests feed such a batch only there."""
    path = Path(__file__).parents[2] / "engines" / "vllm_gpu" / "test_decode.py"
    spec = importlib.util.spec_from_file_location("vllm_gpu_test_decode", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    non_causal = {c.id for c in module.CASES if not c.causal}
    fed = {(impl, case_id) for impl, case_id in module.GOLDENS if case_id in non_causal}
    assert non_causal and fed
    assert (
        {impl for impl, _ in fed}
        == {name for name, impl in module.IMPLEMENTATIONS.items() if impl.non_causal}
        == {"TRITON_MLA"}
    )


def test_a_finding_pattern_names_its_tests_and_no_other() -> None:
    pattern = "test_decode.py::test_lse_matches_golden[TRITON_MLA-*"
    node = "tests/engines/vllm_gpu/test_decode.py::test_lse_matches_golden[TRITON_MLA-case-a]"
    assert finding_matches(node, pattern)
    assert not finding_matches(node.replace("TRITON_MLA", "FLASHMLA"), pattern)
    assert not finding_matches(node.replace("lse_matches", "output_matches"), pattern)
    assert not finding_matches(node.replace("/test_decode", "/xtest_decode"), pattern)
    assert finding_matches("a/b.py::t[x]", "b.py::t[x]") and not finding_matches(
        "a/b.py::t", "t[x]"
    )


def test_an_environment_with_a_shadowed_distribution_is_refused(tmp_path: Path) -> None:
    from conformance.ci.engine_session import SHADOW_CHECK

    clean = _run(SHADOW_CHECK)
    assert clean.returncode == 0, clean.stdout
    info = tmp_path / "kernels-0.19.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kernels\nVersion: 0.19.1\n")
    refused = _run(SHADOW_CHECK, tmp_path)
    assert refused.returncode == 1
    assert "distribution kernels 0.19.1" in refused.stdout and "kernels/ package" in refused.stdout


def _carry_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("vllm_gpu_carry")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_the_bundle_carries_what_vllm_imports_at_its_pins_and_nothing_else(tmp_path) -> None:
    carry = _carry_module()
    wheel = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    metadata = (
        "Name: vllm\nRequires-Dist: pydantic>=2.12.0\nRequires-Dist: fastapi[standard]<0.137,"
        '>=0.133\nRequires-Dist: xgrammar==0.2.8; platform_machine == "x86_64"\n'
        'Requires-Dist: pytest; extra == "test"\n'
    )
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm-0.33.0.dist-info/METADATA", metadata)
    with zipfile.ZipFile(wheel) as archive:
        pins = carry.vllm_pins(archive)
    assert pins["fastapi"] == "fastapi<0.137,>=0.133" and pins["xgrammar"] == "xgrammar==0.2.8"
    assert "pytest" not in pins
    kept = [
        name
        for name in ("pydantic_core-2.50.5-cp312.whl", "kernels-0.19.1-py3.whl", "torch-2.14.whl")
        if carry.carried(Path(name), set())
    ]
    assert kept == ["pydantic_core-2.50.5-cp312.whl"]
    assert not carry.carried(Path("pydantic-2.14.4-py3.whl"), {"pydantic"})


def test_a_wheel_without_flashmla_is_refused(tmp_path: Path) -> None:
    carry = _carry_module()
    wheel = tmp_path / "vllm.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/__init__.py", "")
    with zipfile.ZipFile(wheel) as archive, pytest.raises(SystemExit, match="_flashmla_C"):
        carry.python_tree(archive, tmp_path)


@pytest.mark.parametrize("script", ["vllm_gpu_carry.py", "flashmla_carry.py"])
def test_a_wheel_that_is_not_there_is_one_line(tmp_path: Path, script: str) -> None:
    missing = tmp_path / "vllm.whl"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / script),
            str(tmp_path / "out"),
            "--wheel",
            str(missing),
        ],
        capture_output=True,
        text=True,
    )
    assert (run.returncode, run.stderr) == (1, f"--wheel {missing}: no such file\n")
    assert not (tmp_path / "out").exists()


def test_a_wheel_that_cannot_be_downloaded_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    carry = _carry_module()

    def no_index(*args: object, **kwargs: object) -> list[Path]:
        raise subprocess.CalledProcessError(1, "pip download")

    monkeypatch.setattr(carry, "download", no_index)
    assert carry.main([str(tmp_path / "out"), "--vllm-version", "0.30.0"]) == 1
    assert capsys.readouterr().err == "vllm==0.30.0: no CUDA wheel could be downloaded\n"


def test_the_session_without_nox_says_what_is_wrong_in_one_line(capsys) -> None:
    """No target, an unknown one, an installing option, no engine in this interpreter: one
    line each, usage errors exit 2, a missing engine 1; nothing runs."""
    from conformance.ci.engine_session import USAGE_EXIT, main

    cases = [
        ([], USAGE_EXIT, "usage: python -m conformance.ci.engine_session NAME"),
        (["nosuch"], USAGE_EXIT, "no engine target named 'nosuch'"),
        (["vllm_gpu", "--vllm-version", "0.30.0"], USAGE_EXIT, "this command installs nothing"),
        (["vllm_gpu", "--pin", "x==1"], USAGE_EXIT, "--pin: this command installs nothing"),
    ]
    if importlib.util.find_spec("vllm") is None:
        cases.append((["vllm_gpu"], 1, "has no vllm; install it, or put a bundle on PYTHONPATH"))
    for argv, code, said in cases:
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, (argv, err)
