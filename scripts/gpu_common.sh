# Sourced first by the GPU scripts (`. "$(dirname "$0")/gpu_common.sh"`): what they share.

# gpu_begin OUTDIR: work from the repository root, create OUTDIR and copy all that the
# script prints (stdout and stderr) into OUTDIR/log.txt.
gpu_begin() {
  cd "$(dirname "$0")/.."
  mkdir -p "$1"
  exec > >(tee "$1/log.txt") 2>&1
}
