# Sourced first by the GPU scripts as `. "$(dirname "$0")/gpu_begin.sh" OUTDIR`: work from the
# repository root, create OUTDIR, copy all that the script prints (stdout and stderr) into
# OUTDIR/log.txt and export PYTHONUNBUFFERED=1.
cd "$(dirname "$0")/.."
mkdir -p "$1"
exec > >(tee "$1/log.txt") 2>&1
export PYTHONUNBUFFERED=1
