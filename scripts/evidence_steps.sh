# Sourced by the GPU scripts that save an evidence folder; defines its steps:
#
#   new_run_dir TAG
#     make a new folder reports/gpu-TAG-<UTC time>/ for a run and print its path, relative
#     so that the run's sidecar records no machine path (reports/junit/ is left untouched).
#
# and two steps that return the status of the last of their commands that failed (0 when
# none did):
#
#   save_evidence NAME RUN_DIR OUTDIR FILE...
#     check the run whose JUnit file and sidecar are in RUN_DIR and save it as
#     OUTDIR/evidence/<date>-NAME/ (`conformance signoff --save-evidence NAME`), then copy
#     FILE... into that folder; a run refused as evidence returns 1 after one line naming
#     the script.
#   conformance_evidence BACKEND RUN_DIR OUTDIR FILE...
#     run the shared conformance set on BACKEND into RUN_DIR (made by new_run_dir), copy
#     its BACKEND.xml and BACKEND.meta.json to OUTDIR, then save_evidence BACKEND RUN_DIR
#     OUTDIR FILE...
new_run_dir() {
  local run_dir
  run_dir=reports/gpu-$1-$(date -u +%Y%m%dT%H%M%SZ)
  mkdir -p "$run_dir"
  echo "$run_dir"
}

save_evidence() {
  local name=$1 run_dir=$2 outdir=$3
  shift 3
  if python3 -m conformance signoff --junit-dir "$run_dir" --evidence "$outdir/evidence" \
      --save-evidence "$name"; then
    cp "$@" "$outdir"/evidence/*-"$name"/
  else
    echo "$(basename "$0" .sh): the run was refused as evidence (see above)"
    return 1
  fi
}

conformance_evidence() {
  local backend=$1 run_dir=$2 outdir=$3 status=0
  shift 3
  python3 -m pytest tests/conformance --backend="$backend" --junitxml="$run_dir/$backend.xml" \
    -o junit_suite_name="mla-$backend" -p no:cacheprovider -q -rfEs || status=$?
  cp "$run_dir/$backend.xml" "$run_dir/$backend.meta.json" "$outdir"/ || status=$?
  save_evidence "$backend" "$run_dir" "$outdir" "$@" || status=$?
  return "$status"
}
