#!/usr/bin/env bash
# The cuda session on a GPU machine without internet: what `nox -s cuda` does, checked.
#
# 1. `python3 -m nox --no-venv -s cuda -- --shard I/2` for I = 1, 2 (when nox is installed):
#    the session as written, in this interpreter, installing nothing (no internet here).
# 2. The same shards straight through pytest (what the session runs), reports into $OUT.
# 3. A bad shard must fail in one line and move no report.
# Writes into $OUT (default ./gpu-sessions-out): junit/, nox-*.log, pytest-*.log, summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-sessions-out}
mkdir -p "$out/junit"
export PYTHONUNBUFFERED=1
summary="$out/summary.txt"
: > "$summary"
if python3 -c "import nox" 2>/dev/null; then
  for i in 1 2; do
    python3 -m nox --no-venv -s cuda -- --shard "$i/2" > "$out/nox-$i.log" 2>&1
    echo "nox --no-venv -s cuda -- --shard $i/2: exit $?" >> "$summary"
  done
  cp reports/junit/cuda-shard-*-of-2.* "$out/junit/" 2>/dev/null
else
  echo "nox is not installed: step 1 skipped" >> "$summary"
fi
for i in 1 2; do
  python3 -m pytest tests/conformance --backend=cuda --shard "$i/2" -p no:cacheprovider \
    --junitxml="$out/junit/direct-$i/cuda-shard-$i-of-2.xml" > "$out/pytest-$i.log" 2>&1
  echo "pytest --shard $i/2: exit $?" >> "$summary"
done
python3 - "$out" >> "$summary" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1], "junit").rglob("*.meta.json")):
    doc = json.loads(path.read_text())
    print(path.name, doc.get("shard"), doc.get("shard_algorithm"), doc.get("selection"),
          doc.get("available"), len(doc.get("selected_ids") or []), "of",
          len(doc.get("collected_ids") or []))
PY
python3 -m pytest tests/conformance --backend=cuda --shard 4/3 -p no:cacheprovider \
  --junitxml="$out/junit/direct-1/cuda-shard-1-of-2.xml" > "$out/bad-shard.log" 2>&1
echo "bad shard: exit $? (want 4), $(grep -c . "$out/bad-shard.log") line(s)" >> "$summary"
cat "$summary"
