#!/usr/bin/env bash
# A/B of the kernels against another git revision, both traced in one GPU call
# (sm_90a): how session 8 compared its kernel changes (docs/PERF.md), by hand.
#   bash tools/trace_ab.sh --prepare REV      # here (git): REV's csrc/,
#                                             # tools/trace.cu and its headers into tools/ab/
#   bash tools/trace_ab.sh gemm:128,7168,16384 dual:256,3072,4096 ...   # there
# tools/ab/ is untracked and not ignored, so the device tool carries it with
# the working tree; delete it before committing. On the GPU machine this builds
# REV's trace tool from tools/ab/ (a) and this tree's (b) at once, then runs
# a, b, a, b and prints each run's event times in us, one column per case, in
# the order given. TRACE_FLAGS and TRACE_PLAIN (tools/trace.sh) go to both
# builds: TRACE_PLAIN=1 for a verdict on a kernel change (PERF.md session 9;
# REV's trace.cu needs its plain-build stubs, from 7655470 on), with
# TRACE_PRE=icache (REV's trace.cu must know it: session 45 on) for
# single calls as the extension sees them (PERF.md, session 45). AB_STEP=build
# builds both and stops (to overlap the compile with other GPU work);
# AB_STEP=run runs the binaries an earlier build left.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --prepare ]; then
  [ $# -eq 2 ] || { echo "usage: bash tools/trace_ab.sh --prepare REV" >&2; exit 2; }
  rm -rf tools/ab && mkdir -p tools/ab
  # trace.cu and the tools/ headers it includes (those REV has: probe_common.cuh from session 45 on)
  files=$(git ls-tree --name-only "$2" tools/trace.cu tools/cuda_check.cuh tools/probe_common.cuh)
  git archive "$2" csrc $files | tar -x -C tools/ab
  echo "tools/ab: csrc/ and $(echo $files) of $(git rev-parse --short "$2") (delete before committing)"
  exit 0
fi
[ -d tools/ab/csrc ] || { echo "tools/ab/ is missing: bash tools/trace_ab.sh --prepare REV first" >&2; exit 2; }
step=${AB_STEP:-all}
[ $# -gt 0 ] || [ "$step" = build ] || { echo "usage: bash tools/trace_ab.sh CASE... (cases as for tools/trace.sh)" >&2; exit 2; }
if [ "$step" != run ]; then
TRACE_DEF=-DNVFP4_TRACE
[ "${TRACE_PLAIN:-0}" = 1 ] && TRACE_DEF=
(cd tools/ab && nvcc -O3 -std=c++17 -lineinfo -DNVFP4_WITH_CUDA $TRACE_DEF --expt-relaxed-constexpr ${TRACE_FLAGS:-} \
  -gencode=arch=compute_90a,code=sm_90a -Icsrc -o /tmp/nvfp4_trace_a tools/trace.cu csrc/cuda/*.cu) &
build_a=$!
TRACE_BIN=/tmp/nvfp4_trace_b bash tools/trace.sh &
build_b=$!
wait $build_a
wait $build_b
fi
[ "$step" = build ] && exit 0
echo "cases: $*"
for round in 1 2; do
  for v in a b; do
    out=$(/tmp/nvfp4_trace_$v "$@" 2>&1) || { echo "$v: the trace failed:" >&2; printf '%s\n' "$out" | tail -5 >&2; exit 1; }
    echo "$v: $(printf '%s\n' "$out" | sed -nE 's/^== .*: event ([0-9.]+) us.*/\1/p' | tr '\n' ' ')"
  done
done
