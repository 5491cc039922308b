#!/usr/bin/env bash
# Build dev/trace.cu against a traced copy of the CUDA kernels (-DNVFP4_TRACE)
# and run it: bash dev/trace.sh gemm:128,7168,2048 gemv:7168,2048,4 ...
# (sm_90a; the extension's build is untouched). Binary: ${TRACE_BIN:-/tmp/nvfp4_trace};
# TRACE_FLAGS adds nvcc flags.
# TRACE_PLAIN=1 builds the kernels without their trace points: event times
# only, of the code the extension runs (use it to compare kernel variants).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TRACE_BIN:-/tmp/nvfp4_trace}
TRACE_DEF=-DNVFP4_TRACE
[ "${TRACE_PLAIN:-0}" = 1 ] && TRACE_DEF=
# every kernel file (as dev/trace_ab.sh), compiled side by side, then linked
OBJ=$(mktemp -d)
trap 'rm -rf "$OBJ"' EXIT  # a failed compile stops the script (set -e) without leaving objects behind
for f in dev/trace.cu csrc/cuda/*.cu; do
  nvcc -O3 -std=c++17 -lineinfo -DNVFP4_WITH_CUDA $TRACE_DEF --expt-relaxed-constexpr ${TRACE_FLAGS:-} \
    -gencode=arch=compute_90a,code=sm_90a -Icsrc -c -o "$OBJ/$(basename "$f").o" "$f" &
done
for job in $(jobs -p); do wait "$job"; done
nvcc -gencode=arch=compute_90a,code=sm_90a -o "$BIN" "$OBJ"/*.o
if [ $# -gt 0 ]; then "$BIN" "$@"; fi
