#!/usr/bin/env bash
# The decode benchmark on an offline GPU machine, FlashInfer timed beside ours.
#
# Uses the machine's own python3, torch and triton. Wheels carried in .whl/ (FlashInfer's
# trimmed wheel and apache-tvm-ffi, plus ninja where the machine lacks it) are installed into
# a private target folder on PYTHONPATH; FlashInfer's JIT gets Hopper's arch, its workspace
# and caches under /tmp, and ninja on PATH. Without FlashInfer the benchmark still runs and
# records why FlashInfer was not timed. Writes into OUTDIR (default $OUT): the benchmark's
# <date>-<gpu>.{json,md}, planner_cases.json (the device planner and the captured step on
# the same cases, benchmarks/bench_planner_cases.py), versions.json and log.txt. Extra arguments go to the benchmark
# (default --quick: the side-by-side table; give e.g. --tune for more).
#
#   scripts/gpu_bench.sh [OUTDIR] [benchmark arguments...]      e.g. scripts/gpu_bench.sh "$OUT"
set -uo pipefail
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  out=$1
  shift
else
  out=${OUT:?usage: scripts/gpu_bench.sh [OUTDIR] [benchmark arguments...] (OUTDIR defaults to \$OUT)}
fi
[ $# -gt 0 ] || set -- --quick
. "$(dirname "$0")/gpu_begin.sh" "$out"
started=$(date +%s)

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws \
  TVM_FFI_CACHE_DIR=/tmp/tvm-ffi
mkdir -p "$FLASHINFER_WORKSPACE_BASE" "$TVM_FFI_CACHE_DIR"
if ninja_bin=$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null); then
  export PATH=$ninja_bin:$PATH
fi

python3 - "$out/versions.json" <<'PY'
import importlib, json, platform, shutil, sys
info = {"python": platform.python_version(), "ninja": shutil.which("ninja") or "not found"}
for name in ("torch", "triton", "flashinfer", "tvm_ffi"):
    try:
        info[name] = getattr(importlib.import_module(name), "__version__", "unknown")
    except Exception as exc:  # recorded: the benchmark says what it could not time
        info[name] = f"not importable: {type(exc).__name__}: {exc}"[:200]
json.dump(info, open(sys.argv[1], "w"), indent=2)
print(json.dumps(info, indent=2))
PY

status=0
python3 -m benchmarks.bench_decode --out "$out" "$@" || status=$?
python3 -m benchmarks.bench_planner_cases --out "$out" || status=$?
echo "gpu_bench: exit status $status after $(( $(date +%s) - started )) s"
exit "$status"
