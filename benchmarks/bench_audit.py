"""Benchmark of the static audit on a generated 4,000-file engine-shaped tree.

``python -m benchmarks.bench_audit [--files N] [--jobs J] [--out DIR]`` (stdlib only, no
torch). It writes a tree of N ``.py`` files (default 4,000) in a temporary folder: 92 %
ordinary modules (imports, classes, functions, about 120 lines each), the rest tests,
benchmarks and builders that hold construction sites, stored layer stubs, ``object.__new__``
stand-ins and builders reading layers from a ``static_forward_context``. It then runs
``python -m conformance.audit.cli TREE --jobs J`` three times in a fresh process: with no
cache, with a cold cache and with a warm one, and reports for each the wall time, and the
CPU time and peak resident memory of the whole process tree (main process plus workers,
RSS sampled every 10 ms from /proc; also the largest single process, from ``getrusage``).
Targets (issue 15): at most 10 s wall and 300 MB peak on 2 cores. A benchmark, not a timed
test.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_WALL_S, TARGET_RSS_MB = 10.0, 300.0

PLAIN = '''"""Module {n}: ordinary engine code the audit only hashes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pkg.m{prev} import Helper{prev}


@dataclass
class Config{n}:
    size: int = {n}
    ratio: float = 0.5
    name: str = "m{n}"


class Helper{n}(Helper{prev}):
    """Helper {n}."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cache: dict[int, float] = {{}}

'''
METHOD = """    def step_{k}(self, x: float) -> float:
        if x in self.cache:
            return self.cache[x]
        value = math.sqrt(abs(x) + {k}) * self.size
        for i in range({k}):
            value += i / (1 + value)
        self.cache[x] = value
        return value

"""
BUILDER = """from pkg.record import CommonAttentionMetadata


class Builder{n}:
    def __init__(self, layer_names, vllm_config):
        layer = vllm_config.compilation_config.static_forward_context[layer_names[0]]
        self.rank = layer.kv_lora_rank
        self.rope = layer.qk_rope_head_dim

    def build(self, common_prefix_len, common_attn_metadata: CommonAttentionMetadata):
        bound = common_attn_metadata.seq_lens_cpu_upper_bound
        assert bound is not None
        return bound


class Backend{n}:
    @staticmethod
    def get_builder_cls():
        return Builder{n}
"""
TEST = """from types import SimpleNamespace

from pkg.builder{b} import Backend{b}, Builder{b}
from pkg.record import CommonAttentionMetadata


class Impl{n}:
    def __init__(self):
        self.dtype = "fp8"

    def forward(self):
        return self.dtype


def test_stub_{n}(cfg, t):
    cfg.compilation_config.static_forward_context["l"] = SimpleNamespace(kv_lora_rank=1{extra})
    Builder{b}(["l"], cfg)


def test_site_{n}(t):
    impl = object.__new__(Impl{n})
    impl.dtype = "bf16"
    impl.forward()
    return Backend{b}.get_builder_cls(), CommonAttentionMetadata(t, 1{bound})
"""
RECORD = """from dataclasses import dataclass


@dataclass
class CommonAttentionMetadata:
    query_start_loc: object
    num_reqs: int
    seq_lens_cpu_upper_bound: object = None
"""


def write_tree(root: Path, files: int, *, all_anchored: bool = False) -> None:
    """The generated tree (module docstring)."""
    pkg, tests = root / "pkg", root / "tests"
    pkg.mkdir(parents=True)
    tests.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "record.py").write_text(RECORD)
    builders = 40
    special = int(files * 0.08)
    for n in range(builders):
        (pkg / f"builder{n}.py").write_text(BUILDER.format(n=n))
    for n in range(special - builders):
        extra = ", qk_rope_head_dim=2" if n % 5 else ""
        bound = ", seq_lens_cpu_upper_bound=t" if n % 7 else ""
        text = TEST.format(n=n, b=n % builders, extra=extra, bound=bound)
        (tests / f"test_t{n}.py").write_text(text)
    (pkg / "m0.py").write_text("class Helper0:\n    pass\n")
    for n in range(1, files - special - 2):
        body = PLAIN.format(n=n, prev=n - 1) + "".join(METHOD.format(k=k) for k in range(10))
        if all_anchored:  # worst case: every file mentions an anchor, so every file is parsed
            body += "\n\ndef make(cls):\n    return object.__new__(cls)\n"
        (pkg / f"m{n}.py").write_text(body)


def _tree_rss_kb(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/status") as handle:
                total += next((int(x.split()[1]) for x in handle if x.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    stack += [int(c) for c in handle.read().split()]
        except (OSError, ValueError):
            continue
    return total


def run_once(tree: Path, jobs: int, cache: list[str]) -> dict[str, float]:
    """One audit in a fresh process: wall seconds, peak tree RSS and largest process RSS."""
    command = [
        sys.executable,
        "-m",
        "conformance.audit.cli",
        str(tree),
        "--no-config",
        "--jobs",
        str(jobs),
        *cache,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        peak = max(peak, _tree_rss_kb(process.pid))
        time.sleep(0.01)
    wall = time.perf_counter() - started
    summary = process.stderr.read().decode().strip().splitlines()[-1] if process.stderr else ""
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    largest = after.ru_maxrss / 1024
    return {  # type: ignore[dict-item]
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_mb": peak / 1024,
        "largest_mb": largest,
        "summary": summary,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write <date>-audit.md here")
    parser.add_argument(
        "--all-anchored", action="store_true", help="worst case: every module is parsed"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        tree, cache = Path(folder) / "tree", Path(folder) / "cache"
        write_tree(tree, args.files, all_anchored=args.all_anchored)
        count = sum(1 for _ in tree.rglob("*.py"))
        size = sum(p.stat().st_size for p in tree.rglob("*.py")) / 1e6
        runs = {
            "no cache": run_once(tree, args.jobs, ["--no-cache"]),
            "cold cache": run_once(tree, args.jobs, ["--cache-dir", str(cache)]),
            "warm cache": run_once(tree, args.jobs, ["--cache-dir", str(cache)]),
        }
    lines = [
        f"# Audit benchmark, {datetime.date.today().isoformat()}",
        "",
        f"`python -m benchmarks.bench_audit --files {args.files} --jobs {args.jobs}"
        f"{' --all-anchored' if args.all_anchored else ''}` on "
        f"{os.cpu_count()} cores, Python {platform.python_version()}: a generated tree of "
        f"{count} files ({size:.1f} MB). Targets: <= {TARGET_WALL_S:.0f} s wall, "
        f"<= {TARGET_RSS_MB:.0f} MB peak.",
        "",
        "| run | wall (s) | CPU, all processes (s) | peak RSS, all processes (MB) "
        "| largest process (MB) | audit summary |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        lines.append(
            f"| {name} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['peak_mb']:.0f} "
            f"| {r['largest_mb']:.0f} "
            f"| {r['summary']} |"
        )
    ok = all(r["wall_s"] <= TARGET_WALL_S and r["peak_mb"] <= TARGET_RSS_MB for r in runs.values())
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines += [
        "",
        f"Targets met: {'yes' if ok else 'no'}. Load average at the end: {load} (wall time "
        f"on a busy machine overstates; CPU / {args.jobs} is the wall time of an idle one).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / f"{datetime.date.today().isoformat()}-audit.md"
        with target.open("a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
