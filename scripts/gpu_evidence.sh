#!/usr/bin/env bash
# One-shot conformance run of the `cuda` backend on a GPU machine without internet access.
#
# Uses the machine's own python3, torch and triton; pure-Python wheels the machine lacks
# (junitparser, defusedxml) may be carried in .whl/. Runs exactly what `nox -s cuda` runs,
# plus the Triton kernel selftests natively, then the decode benchmark, and writes into
# OUTDIR: cuda.xml + cuda.meta.json (the conformance run), kernels.xml, versions.json,
# the benchmark's <date>-<gpu>.{json,md} and log.txt. A copy of the tree without git
# metadata names its commit in MLA_CONFORMANCE_GIT_COMMIT.
#
#   MLA_CONFORMANCE_GIT_COMMIT=<sha> scripts/gpu_evidence.sh OUTDIR [--no-bench]
set -uo pipefail
out=${1:?usage: scripts/gpu_evidence.sh OUTDIR [--no-bench]}
bench=1
[ "${2:-}" = "--no-bench" ] && bench=0
cd "$(dirname "$0")/.."
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
export PYTHONUNBUFFERED=1 MLA_CONFORMANCE_BACKEND=cuda

if ls .whl/*.whl >/dev/null 2>&1; then
  site_dir=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site_dir" .whl/*.whl && export PYTHONPATH=$site_dir${PYTHONPATH:+:$PYTHONPATH}
fi

python3 - "$out/versions.json" <<'PY'
import json, os, platform, subprocess, sys
import torch
commit = os.environ.get("MLA_CONFORMANCE_GIT_COMMIT") or "unknown"
info = {"backend": "cuda", "source": f"scripts/gpu_evidence.sh at commit {commit}",
        "git_commit": commit, "python": platform.python_version(),
        "torch": torch.__version__, "cuda_runtime": torch.version.cuda}
try:
    import triton
    info["triton"] = triton.__version__
except ImportError as exc:
    info["triton"] = f"not importable: {exc}"
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    info.update(device=props.name, sm_count=props.multi_processor_count,
                capability=f"{props.major}.{props.minor}",
                memory_gib=round(props.total_memory / 2**30, 1))
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True)
info["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
json.dump(info, open(sys.argv[1], "w"), indent=2)
print(json.dumps(info, indent=2))
PY

status=0
# Into a new folder of its own under reports/ (a relative path, so the sidecar records no
# machine path), then copied to OUTDIR; reports/junit/ is left untouched.
run_dir=reports/gpu-evidence-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run_dir"
python3 -m pytest tests/conformance --backend=cuda --junitxml="$run_dir/cuda.xml" \
  -o junit_suite_name=mla-cuda -p no:cacheprovider -q -rfEs || status=$?
cp "$run_dir"/cuda.xml "$run_dir"/cuda.meta.json "$out"/ || status=$?
python3 -m pytest tests/selftest/kernels/test_triton_mla.py --junitxml="$out/kernels.xml" \
  -p no:cacheprovider -q -rfEs || status=$?
if [ "$bench" = 1 ]; then
  python3 -m benchmarks.bench_decode --out "$out" || status=$?
fi
echo "gpu_evidence: exit status $status"
exit "$status"
