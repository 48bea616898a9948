#!/usr/bin/env bash
# Conformance run of the `flashmla` backend on a Hopper GPU machine without internet.
#
# FlashMLA's ops come from an installed flash_mla or vLLM, else from the folder named by
# MLA_FLASHMLA_DIR (default .flashmla/, made by scripts/flashmla_carry.py). Pure-Python wheels
# the machine lacks may be carried in .whl/. Runs the shared conformance set, saves the
# evidence folder (checked by --save-evidence), then the backend's GPU selftests (CUDA-graph
# capture). Writes into OUTDIR: evidence/<date>-flashmla/, flashmla.xml + flashmla.meta.json,
# selftests.xml and log.txt. A copy of the tree without git metadata names its commit in
# MLA_CONFORMANCE_GIT_COMMIT.
#
#   MLA_CONFORMANCE_GIT_COMMIT=<sha> scripts/gpu_flashmla.sh OUTDIR
set -uo pipefail
out=${1:?usage: scripts/gpu_flashmla.sh OUTDIR}
. "$(dirname "$0")/gpu_begin.sh" "$out"
export MLA_CONFORMANCE_BACKEND=flashmla
[ -d .flashmla ] && export MLA_FLASHMLA_DIR=${MLA_FLASHMLA_DIR:-$PWD/.flashmla}

. scripts/carried_wheels.sh
. scripts/evidence_steps.sh
python3 scripts/machine_info.py "$out/machine.json" flashmla scripts/gpu_flashmla.sh

status=0
conformance_evidence flashmla "$(new_run_dir flashmla)" "$out" "$out/machine.json" || status=$?
python3 -m pytest tests/selftest/backends/test_flashmla_gpu.py --junitxml="$out/selftests.xml" \
  -p no:cacheprovider -q -rfEs || status=$?
echo "gpu_flashmla: exit status $status"
exit "$status"
