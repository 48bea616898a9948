"""The Gluon decode on any machine: it compiles for sm_90 with the installed Triton, and a
launch that cannot compile it falls back to the Triton kernel.

Gluon is experimental and renames as it goes (Triton 3.6 ``thread_barrier`` and
``async_copy_global_to_shared``, 3.7 ``barrier``, 3.9 ``async_load``), so the kernel is
compiled here for an sm_90 target without a GPU (Triton's own ptxas) — in CI with the Triton
the suite's set-up installs. The fallback runs under the CPU interpreter with a stand-in
for the Gluon kernel that fails to compile, and must still give the reference's output.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

_CASES = runpy.run_path(str(Path(__file__).with_name("triton_cases.py")))
check, hand_plan, make_case, tm, unfolded_tiles = (
    _CASES[name] for name in "check hand_plan make_case tm unfolded_tiles".split()
)

from kernels import gluon_mla  # noqa: E402

HOPPER_MODULE = "triton.experimental.gluon.language.nvidia.hopper"
ROOT = Path(__file__).resolve().parents[3]


COMPILE = """
import json, re, sys
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from kernels.gluon_mla import kernel as gluon_kernel

fp8, ws, narrow = (sys.argv[2].endswith("fp8"), sys.argv[2].startswith("ws"),
                   sys.argv[2].startswith("narrow"))
kernel = gluon_kernel(getattr(torch, "float8_e4m3fn") if fp8 else torch.bfloat16, ws=ws,
                      narrow=narrow)
constexprs = json.loads(sys.argv[1])
warps = 4 if ws else 4 * constexprs.get("WARPGROUPS", 2)
types, attrs = {}, {}
for index, name in enumerate(kernel.arg_names):
    if name in constexprs:
        types[name] = "constexpr"
        continue
    if name in ("q_ptr", "kv_ptr"):
        types[name] = "*fp8e4nv" if fp8 else "*bf16"
    elif name == "out_ptr":
        types[name] = "*bf16"
    elif name in ("lse_ptr", "part_o_ptr", "part_lse_ptr", "q_scale_ptr", "kv_scale_ptr"):
        types[name] = "*fp32"
    elif name.endswith("_ptr"):
        types[name] = "*i32"
    elif name in ("q_scale_value", "kv_scale_value", "sm_scale_log2"):
        types[name] = "fp32"
    else:
        types[name] = "i32"
    if name.endswith("_ptr") or (name.startswith("stride_") and name != "stride_pl_head"):
        attrs[(index,)] = [["tt.divisibility", 16]]
source = GluonASTSource(kernel, types, constexprs=constexprs, attrs=attrs)
compiled = triton.compile(
    source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}
)
ptx = compiled.asm["ptx"]
print(json.dumps({
    "wgmma": ptx.count("wgmma.mma_async"), "cp_async": ptx.count("cp.async.cg"),
    "setmaxnreg": sorted({
        int(line.split()[-1].rstrip(";")) for line in ptx.splitlines() if "setmaxnreg" in line
    }),
    "mbarrier_wait": ptx.count("mbarrier.try_wait"), "warps": compiled.metadata.num_warps,
    "shared": compiled.metadata.shared, "cubin": "cubin" in compiled.asm,
}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None
    or importlib.util.find_spec(HOPPER_MODULE.rsplit(".", 1)[0]) is None,
    reason="this Triton has no Gluon",
)
@pytest.mark.parametrize(
    ("kind", "block_n", "stages"),
    [
        ("bf16", 64, 2),
        ("bf16", 32, 3),
        ("fp8", 64, 3),
        ("ws", 32, 4),
        ("ws", 64, 2),
        ("ws-fp8", 32, 6),
        ("ws-fp8", 32, 2),
        ("narrow-fp8", 64, 3),  # 16 rows, one warpgroup
        ("narrow-w8-fp8", 64, 3),  # 32 rows, two warpgroups
    ],
)
def test_the_gluon_decode_compiles_for_sm90_with_this_triton(
    kind: str, block_n: int, stages: int, tmp_path: Path
) -> None:
    pytest.importorskip(HOPPER_MODULE, reason="this Triton has no Gluon Hopper module")
    constexprs = {
        "PAGE_SIZE": 64, "CAUSAL": True, "BLOCK_N": block_n, "STAGES": stages, "D_V": 512,
        "D_R": 64, "P_FP8": kind.endswith("fp8"), "SCALES_IN_MEMORY": False, "GROUP_MODE": 2,
        "FAULT": 0,
    }  # fmt: skip
    if kind.startswith("narrow"):
        constexprs |= (
            {"ROWS": 32, "WARPGROUPS": 2} if "w8" in kind else {"ROWS": 16, "WARPGROUPS": 1}
        )
    # A process of its own: this one may have decorated the Triton kernels for the
    # interpreter (triton_cases.py sets TRITON_INTERPRET=1 without a GPU), and a cache of its
    # own, so that the compiler really runs.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env |= {
        "TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1",
        "TRITON_DUMP_PTXAS_LOG": "1",
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, json.dumps(constexprs), kind], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    # Both products on wgmma, every tile through cp.async: the kernel is the one designed.
    assert facts["wgmma"] > 0 and facts["cp_async"] > 0, facts
    assert facts["shared"] <= 232448, f"more shared memory than an sm_90 block has: {facts}"
    assert facts["cubin"], "ptxas did not make a cubin"
    if kind.startswith("ws"):
        # Three warpgroups (consumer 0, consumer 1, the loader), registers moved between them
        # (setmaxnreg), tiles handed over on mbarriers.
        assert facts["warps"] == 12 and facts["mbarrier_wait"] > 0, facts
        assert 232 in facts["setmaxnreg"] and 40 in facts["setmaxnreg"], facts
        # P in shared memory for both consumers at either tile shape: the wgmmas pipeline.
        assert "C7512" not in done.stdout, "ptxas serialises the warp-specialized wgmmas"
    print(facts, *re.findall(r".*(?:Used \d+ registers|spill|C7512).*", done.stdout), sep="\n")


class _Uncompilable:
    """Stands in for the Gluon kernel where it does not compile."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            from triton.compiler.errors import CompilationError

            raise CompilationError(None, ast.parse("x").body[0], "stand-in")

        return launch


def test_a_launch_that_cannot_compile_the_gluon_decode_falls_back(monkeypatch) -> None:
    pytest.importorskip("triton.compiler.errors")
    monkeypatch.setattr(gluon_mla, "_disabled", [])
    monkeypatch.setattr(gluon_mla, "_variant_disabled", {})
    monkeypatch.setattr(gluon_mla, "usable", lambda *args: not gluon_mla._disabled)
    monkeypatch.setattr(gluon_mla, "kernel", lambda *args, **kwargs: _Uncompilable())
    case = make_case([70, 20], q_len=1, num_heads=64, page_size=16, seed=31)
    plan = hand_plan(case, unfolded_tiles(case, {0: (2,)}), num_programs=2, heads_per_work=64)
    gluon = {"GLUON": 1}  # the two-warpgroup Gluon decode (no config: the WS one first)
    with pytest.warns(UserWarning, match="the Gluon decode does not compile"):
        check(case, plan, causal=True, config=gluon)  # the Triton kernel's output, checked
    assert "stand-in" in (gluon_mla.disabled_reason() or "")
    check(case, plan, causal=True, config=gluon)  # disabled now: no second attempt, no warning
    check(case, plan, causal=True)  # nor through the WS decode's fallback
    assert not gluon_mla.variant_disabled_reason("ws"), "WS was tried with Gluon disabled"


def test_a_ws_launch_that_cannot_compile_falls_back_to_the_gluon_decode(monkeypatch) -> None:
    pytest.importorskip("triton.compiler.errors")
    monkeypatch.setattr(gluon_mla, "_disabled", [])
    monkeypatch.setattr(gluon_mla, "_variant_disabled", {})
    monkeypatch.setattr(gluon_mla, "usable", lambda *args: not gluon_mla._disabled)
    tried: list[bool] = []

    def uncompilable(kv_dtype=None, ws: bool = False, narrow: bool = False) -> _Uncompilable:
        tried.append(ws)
        return _Uncompilable()

    monkeypatch.setattr(gluon_mla, "kernel", uncompilable)
    case = make_case([70, 20], q_len=1, num_heads=64, page_size=16, seed=32)
    plan = hand_plan(case, unfolded_tiles(case, {0: (2,)}), num_programs=2, heads_per_work=64)
    with pytest.warns(UserWarning, match="the warp-specialized Gluon decode does not compile"):
        with pytest.warns(UserWarning, match="the Gluon decode does not compile"):
            check(case, plan, causal=True, config={"WS": 1})  # the Triton kernel's, checked
    assert tried == [True, False], "not the warp-specialized decode first, then the Gluon one"
    assert "stand-in" in (gluon_mla.variant_disabled_reason("ws") or "")
