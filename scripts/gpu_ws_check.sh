#!/usr/bin/env bash
# The warp-specialized Gluon decode (kernels/gluon_mla/ws_kernel.py) on an sm_90 GPU machine
# without internet access: its selftests beside the other Gluon ones, then the 64-row bf16
# candidates of `--tune` timed side by side (the default Gluon config, the Triton kernel and
# the warp-specialized one, config {"WS": 1, ...}), on the 128-head bf16 cases.
#
# Uses the machine's own python3, torch and triton; pure-Python wheels the machine lacks may
# be carried in .whl/. Writes into OUTDIR: gluon.xml (the Gluon and Triton kernel selftests,
# the warp-specialized ones included), ws_compile.txt (its ptxas report: registers, spills),
# the benchmark's <date>-<gpu>.{json,md} (the tune table under "tuning") and log.txt.
#
#   scripts/gpu_ws_check.sh OUTDIR [--no-bench]
set -uo pipefail
out=${1:?usage: scripts/gpu_ws_check.sh OUTDIR [--no-bench]}
bench=1
[ "${2:-}" = "--no-bench" ] && bench=0
. "$(dirname "$0")/gpu_begin.sh" "$out"

. scripts/carried_wheels.sh

python3 scripts/machine_info.py "$out/machine.json" cuda scripts/gpu_ws_check.sh

status=0
# The sm_90 compile of every Gluon kernel with this Triton (ptxas's report printed: -s).
python3 -m pytest tests/selftest/kernels/test_gluon_portability.py -p no:cacheprovider -q -s \
  -rfEs >"$out/ws_compile.txt" 2>&1 || status=$?
grep -E "setmaxnreg|Used [0-9]+ registers|spill|passed|failed" "$out/ws_compile.txt"
python3 -m pytest tests/selftest/kernels/test_gluon_mla.py \
  tests/selftest/kernels/test_triton_mla.py --junitxml="$out/gluon.xml" -p no:cacheprovider \
  -q -rfEs || status=$?
if [ "$bench" = 1 ]; then
  python3 -m benchmarks.bench_decode --tune-only 64-bf16 --only h128-bf16 --quick \
    --impls triton --out "$out" || status=$?
fi
echo "gpu_ws_check: exit status $status"
exit "$status"
