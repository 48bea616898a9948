#!/usr/bin/env bash
# GPU run of the device planner (kernels/triton_planner.py) on a machine without internet.
#
# Uses the machine's own python3, torch and triton; pure-Python wheels it lacks
# (junitparser, defusedxml) may be carried in .whl/. Writes into OUTDIR: versions.json,
# selftest.xml (the device-planner selftests with MLA_PLANNER_FUZZ random batches and the
# CUDA-graph step), cuda.xml (the cuda conformance set, which
# now plans on the GPU), device_planner.json and planner_cases.json (the benchmarks: random
# batches, and the decode benchmark's cases) and log.txt.
#
#   scripts/gpu_planner.sh OUTDIR [--no-conformance] [--no-bench]
set -uo pipefail
out=${1:?usage: scripts/gpu_planner.sh OUTDIR [--no-conformance] [--no-bench]}
conformance=1
bench=1
for flag in "${@:2}"; do
  case $flag in
    --no-conformance) conformance=0 ;;
    --no-bench) bench=0 ;;
    *) echo "gpu_planner: unknown flag $flag" >&2; exit 2 ;;
  esac
done
. "$(dirname "$0")/gpu_begin.sh" "$out"
export MLA_PLANNER_FUZZ=${MLA_PLANNER_FUZZ:-2000}
start=$(date +%s)

. scripts/carried_wheels.sh

python3 - "$out/versions.json" <<'PY'
import json, sys
import torch, triton
info = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info.update(device=p.name, sm_count=p.multi_processor_count)
json.dump(info, open(sys.argv[1], "w"), indent=2)
print(info)
PY

status=0
python3 -m pytest tests/selftest/kernels/test_device_planner.py \
  tests/selftest/kernels/test_planned_decode.py \
  --junitxml="$out/selftest.xml" -p no:cacheprovider -q -rfEs --durations=5 || status=$?
echo "gpu_planner: selftests done after $(( $(date +%s) - start )) s"
if [ "$conformance" = 1 ]; then
  MLA_CONFORMANCE_BACKEND=cuda python3 -m pytest tests/conformance --backend=cuda \
    --junitxml="$out/cuda.xml" -o junit_suite_name=mla-cuda -p no:cacheprovider -q -rfEs \
    || status=$?
  echo "gpu_planner: conformance done after $(( $(date +%s) - start )) s"
fi
if [ "$bench" = 1 ]; then
  python3 -m benchmarks.bench_device_planner --out "$out" || status=$?
  python3 -m benchmarks.bench_planner_cases --out "$out" || status=$?
fi
echo "gpu_planner: exit status $status after $(( $(date +%s) - start )) s"
exit "$status"
