#!/usr/bin/env bash
# Per-SASS-instruction Nsight Compute metrics (warp stall samples) of the
# tensor-core kernel (KERNEL=gemv_kernel: the GEMV) for one shape, as CSV
# (after a build):
#   bash scripts/ncu_source.sh M N K [dual]   -> $OUT/source_MxNxK[_dual].csv
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
tag="$1x$2x$3${4:+_$4}"
timeout 400 ncu --clock-control none -k regex:${KERNEL:-matmul_sm90} -s 2 -c 1 --section SourceCounters --section WarpStateStats \
  --page source --print-source sass --csv python3 scripts/profile_gemm.py "$@" >"$OUT/source_$tag.csv" 2>"$OUT/source_$tag.err"
echo "rc=$? $(wc -c <"$OUT/source_$tag.csv") bytes"; head -c 600 "$OUT/source_$tag.csv"; tail -3 "$OUT/source_$tag.err"
