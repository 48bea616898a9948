#!/usr/bin/env bash
# Conformance run of the `flashinfer` backend on an NVIDIA GPU machine without internet.
#
# Installs the wheels carried in .whl/ (a trimmed flashinfer-python wheel, apache-tvm-ffi,
# and any pure-Python wheels the machine lacks) into a temporary site directory, points
# FlashInfer's JIT at /tmp (FLASHINFER_WORKSPACE_BASE, TVM_FFI_CACHE_DIR; Hopper only:
# FLASHINFER_CUDA_ARCH_LIST=9.0a), puts ninja on PATH, then runs the shared conformance
# set and saves the evidence folder (checked by --save-evidence). Writes into $OUT (or the
# first argument): evidence/<date>-flashinfer/, flashinfer.xml + flashinfer.meta.json,
# versions.json and log.txt. A copy of the tree without git metadata names its commit in
# MLA_CONFORMANCE_GIT_COMMIT.
#
#   MLA_CONFORMANCE_GIT_COMMIT=<sha> scripts/gpu_flashinfer.sh [OUTDIR]
set -uo pipefail
out=${1:-${OUT:?usage: scripts/gpu_flashinfer.sh OUTDIR (or set OUT)}}
. "$(dirname "$0")/gpu_begin.sh" "$out"
export MLA_CONFORMANCE_BACKEND=flashinfer

. scripts/carried_wheels.sh
. scripts/evidence_steps.sh
jit=$(mktemp -d /tmp/flashinfer-jit.XXXXXX)
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$jit/workspace}
export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-$jit/tvm-ffi}
ninja_dir=$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null) \
  && export PATH=$ninja_dir:$PATH || echo "ninja not importable: FlashInfer's JIT may fail"

python3 scripts/machine_info.py "$out/versions.json" flashinfer \
  scripts/gpu_flashinfer.sh

status=0
conformance_evidence flashinfer "$(new_run_dir flashinfer)" "$out" "$out/versions.json" \
  || status=$?
# The largest error / tolerance ratios of the numerics contract (JUnit properties).
python3 - "$out/flashinfer.xml" <<'PY' || true
import re, sys
text = open(sys.argv[1]).read()
worst = {}
cases = re.findall(r'<testcase [^>]*name="(test_decode_matches_golden\[[^"]+)"(.*?)</testcase>',
                   text, flags=re.S)
for name, body in cases:
    props = dict(re.findall(r'<property name="([^"]+)" value="([^"]+)"', body))
    if "out_max_abs_err" in props:
        print(name, {k: props[k] for k in sorted(props) if k.endswith(("err", "diff", "ratio"))})
        for key in ("out_cos_ratio", "out_abs_ratio", "lse_cos_ratio", "lse_abs_ratio"):
            if key in props and float(props[key]) > worst.get(key, (0.0, ""))[0]:
                worst[key] = (float(props[key]), name)
for key, (value, name) in sorted(worst.items()):
    print(f"largest {key}: {value:.3g} ({name})")
PY
echo "exit status $status"
exit $status
