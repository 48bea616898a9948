#!/usr/bin/env bash
# vLLM's own MLA decode (the `vllm_gpu` engine target) on a GPU machine without internet.
#
# Where the machine has no vLLM, the bundle made by scripts/vllm_gpu_carry.py (MLA_VLLM_BUNDLE,
# default .vllm-gpu/: vLLM's Python files with FlashMLA's extensions, and the small wheels its
# attention modules import) is unpacked into a temporary site directory on PYTHONPATH, with
# stand-ins for the extensions it leaves out (conformance.engines.vllm.extensions);
# pure-Python wheels the machine lacks may be carried in .whl/. Runs the target's tests with
# the machine's python3 (`python -m conformance.ci.engine_session vllm_gpu`: JUnit and
# sidecar under reports/junit/), then saves the evidence folder (checked by --save-evidence).
# Writes into OUTDIR: evidence/<date>-vllm_gpu/, vllm_gpu.xml + .meta.json + .statuses.json,
# machine.json and log.txt. A copy of the tree without git metadata names its commit in
# MLA_CONFORMANCE_GIT_COMMIT.
#
#   MLA_CONFORMANCE_GIT_COMMIT=<sha> scripts/gpu_vllm.sh OUTDIR [pytest arguments...]
set -uo pipefail
out=${1:?usage: scripts/gpu_vllm.sh OUTDIR [pytest arguments...]}
shift
. "$(dirname "$0")/gpu_begin.sh" "$out"

bundle=${MLA_VLLM_BUNDLE:-.vllm-gpu}
if ! python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)' \
    && [ -f "$bundle/vllm.tar.xz" ]; then
  site=$(mktemp -d /tmp/vllm-gpu.XXXXXX)
  tar -xJf "$bundle/vllm.tar.xz" -C "$site" || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
    "$bundle"/wheels/*.whl || exit 1
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  python3 -m conformance.engines.vllm.extensions "$site" || exit 1
  echo "gpu_vllm: vLLM from $bundle ($(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wheel"])' "$bundle/provenance.json"))"
fi
. scripts/carried_wheels.sh
. scripts/evidence_steps.sh
python3 scripts/machine_info.py "$out/machine.json" vllm_gpu scripts/gpu_vllm.sh

status=0
python3 -m conformance.ci.engine_session vllm_gpu "$@" || status=$?
cp reports/junit/vllm_gpu.xml reports/junit/vllm_gpu.meta.json reports/junit/vllm_gpu.statuses.json \
  "$out"/ || status=1
run_dir=$(new_run_dir vllm)
cp reports/junit/vllm_gpu.xml reports/junit/vllm_gpu.meta.json "$run_dir"/ || status=1
if [ "$status" = 0 ]; then
  save_evidence vllm_gpu "$run_dir" "$out" "$out/machine.json" \
    reports/junit/vllm_gpu.statuses.json || status=$?
else
  echo "gpu_vllm: no evidence saved (see above)"
fi
echo "gpu_vllm: exit status $status"
exit "$status"
