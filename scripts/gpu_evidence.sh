#!/usr/bin/env bash
# One-shot conformance run of the `cuda` backend on a GPU machine without internet access.
#
# Uses the machine's own python3, torch and triton; pure-Python wheels the machine lacks
# (junitparser, defusedxml) may be carried in .whl/. Runs exactly what `nox -s cuda` runs,
# plus the Triton and Gluon kernel selftests natively, then the decode benchmark, and writes into
# OUTDIR: evidence/<date>-cuda/ (ready to commit as reports/evidence/<date>-cuda/: cuda.xml,
# cuda.meta.json, versions.json with the fingerprint of the files that decide the backend,
# machine.json), cuda.xml + cuda.meta.json, kernels.xml, the benchmark's
# <date>-<gpu>.{json,md} and log.txt. `--save-evidence` refuses a run in which no test
# passed or that did not run on a CUDA device; the script then exits non-zero.
# A copy of the tree without git metadata names its commit in MLA_CONFORMANCE_GIT_COMMIT.
#
#   MLA_CONFORMANCE_GIT_COMMIT=<sha> scripts/gpu_evidence.sh OUTDIR [--no-bench]
set -uo pipefail
out=${1:?usage: scripts/gpu_evidence.sh OUTDIR [--no-bench]}
bench=1
[ "${2:-}" = "--no-bench" ] && bench=0
. "$(dirname "$0")/gpu_begin.sh" "$out"
export MLA_CONFORMANCE_BACKEND=cuda

. scripts/carried_wheels.sh
. scripts/evidence_steps.sh

python3 scripts/machine_info.py "$out/machine.json" cuda scripts/gpu_evidence.sh

status=0
# The evidence folder: checked (passed tests, CUDA device, claims that agree) and fingerprinted.
conformance_evidence cuda "$(new_run_dir evidence)" "$out" "$out/machine.json" || status=$?
python3 -m pytest tests/selftest/kernels/test_triton_mla.py tests/selftest/kernels/test_gluon_mla.py \
  --junitxml="$out/kernels.xml" \
  -p no:cacheprovider -q -rfEs || status=$?
if [ "$bench" = 1 ]; then
  python3 -m benchmarks.bench_decode --out "$out" || status=$?
fi
echo "gpu_evidence: exit status $status"
exit "$status"
