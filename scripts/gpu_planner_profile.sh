#!/usr/bin/env bash
# Where the device planner's time goes, on an NVIDIA GPU without internet (OUT given).
#
#   OUT=DIR bash scripts/gpu_planner_profile.sh
#
# 1. The device-planner selftests natively (scripts/gpu_planner.sh --no-conformance
#    --no-bench: both forms, MLA_PLANNER_FUZZ random batches each, goldens, CUDA-graph step)
#    into OUT/selftests/ (log.txt, versions.json, selftest.xml).
# 2. The former planner (one program doing everything) timed by its own benchmark, from the
#    tree OLD_TREE (e.g. `git archive 33b7720 | tar -x -C old_planner`, carried untracked)
#    or else git's commit OLD_REV (33b7720): OUT/device_planner_old.json.
# 3. The planner as it is: the benchmark's default run (planner alone, step against decode)
#    OUT/device_planner.json, and its profile (each form, each walk warp count, each kernel
#    alone, every plan checked bit-identical to the reference) OUT/device_planner_profile.json.
# 4. OUT/summary.md side by side, and OUT/log.txt. Exit status non-zero on any failure or
#    mismatch. MLA_PLANNER_FUZZ (default 2000 random batches per form) and OLD_REV may be set.
#
# A part alone (two runs within a time limit): `... gpu_planner_profile.sh selftests` (step 1)
# or `... gpu_planner_profile.sh timing` (steps 2-4); both by default.
set -uo pipefail
: "${OUT:?set OUT to the output directory}"
part=${1:-all}
case $part in
  all | selftests | timing) ;;
  *) echo "usage: OUT=DIR $0 [all|selftests|timing]" >&2; exit 2 ;;
esac
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
. "$(dirname "$0")/gpu_begin.sh" "$OUT"
OLD_REV=${OLD_REV:-33b7720}
status=0
start=$(date +%s)

if [ "$part" != timing ]; then
  bash scripts/gpu_planner.sh "$OUT/selftests" --no-conformance --no-bench > /dev/null \
    || { status=$?; echo "gpu_planner_profile: selftests FAILED (see selftests/log.txt)"; }
  sleep 1  # its log's tee may still be writing
  tail -n 5 "$OUT/selftests/log.txt"
  echo "gpu_planner_profile: selftests done after $(( $(date +%s) - start )) s"
  if [ "$part" = selftests ]; then
    echo "gpu_planner_profile: exit status $status"
    exit "$status"
  fi
fi
. scripts/carried_wheels.sh

old_tree=$(mktemp -d)
old_src=
if [ -n "${OLD_TREE:-}" ] && [ -d "$OLD_TREE/kernels" ]; then
  cp -r "$OLD_TREE/." "$old_tree/" && old_src="$OLD_TREE"
elif git cat-file -e "$OLD_REV^{commit}" 2>/dev/null; then
  git archive "$OLD_REV" | tar -x -C "$old_tree" && old_src="commit $OLD_REV"
fi
if [ -n "$old_src" ]; then
  echo "gpu_planner_profile: the former planner from $old_src"
  (cd "$old_tree" && python3 -m benchmarks.bench_device_planner --out "$old_tree/out") \
    && cp "$old_tree/out/device_planner.json" "$OUT/device_planner_old.json" \
    || { status=1; echo "gpu_planner_profile: the former planner's benchmark FAILED"; }
else
  echo "gpu_planner_profile: neither OLD_TREE nor git commit $OLD_REV here: the former" \
    "planner is not timed (the profile's 'fused' rows are its one-program form)"
fi
rm -rf "$old_tree"

python3 -m benchmarks.bench_device_planner --out "$OUT" || status=$?
python3 -m benchmarks.bench_device_planner --profile --out "$OUT" || status=$?

python3 - "$OUT" <<'PY' || status=$?
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def rows(name):
    path = out / name
    return json.loads(path.read_text())["rows"] if path.exists() else []
old = {(r["batch_size"], r["num_heads_q"]): r for r in rows("device_planner_old.json")}
new = {(r["batch_size"], r["num_heads_q"]): r for r in rows("device_planner.json")}
prof = rows("device_planner_profile.json")
lines = ["# Device planner profile", "",
         "µs per plan, 50 plans in one CUDA graph (medians of CUDA events).", "",
         "| B | heads | former | default | fused | split | split-pdl | setup kernel | walk kernel "
         "| finish kernel | best (form, warps) | step ÷ decode |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for key in sorted({(r["batch_size"], r["num_heads_q"]) for r in prof}, key=lambda k: (k[1], k[0])):
    mine = [r for r in prof if (r["batch_size"], r["num_heads_q"]) == key]
    f = next(r for r in mine if r["form"] == "fused" and r["walk_warps"] == "default")
    s = next(r for r in mine if r["form"] == "split" and r["walk_warps"] == "default")
    p = next((r for r in mine if r["form"] == "split-pdl" and r["walk_warps"] == "default"), None)
    best = min(mine, key=lambda r: r["total_us"] if r["total_us"] == r["total_us"] else 1e9)
    o, n = old.get(key), new.get(key)
    cell = lambda r, k, fmt="{:.2f}": fmt.format(r[k]) if r and k in r else "-"
    lines.append(
        f"| {key[0]} | {key[1]} | {cell(o, 'planner_us_per_plan_in_graph')} "
        f"| {cell(n, 'planner_us_per_plan_in_graph')} | {f['total_us']:.2f} | {s['total_us']:.2f} "
        f"| {cell(p, 'total_us')} "
        f"| {cell(s, 'setup_kernel_us')} | {cell(s, 'walk_kernel_us')} "
        f"| {cell(s, 'finish_kernel_us')} "
        f"| {best['total_us']:.2f} ({best['form']}, {best['walk_warps']}) "
        f"| {cell(n, 'step_over_decode', '{:.3f}')} |")
bad = [r for r in prof if r["mismatches"]]
lines += ["", f"Plans checked against the reference planner: {len(prof)}, differing: {len(bad)}."]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if bad or not prof else 0)
PY
echo "gpu_planner_profile: exit status $status after $(( $(date +%s) - start )) s"
exit "$status"
