#!/usr/bin/env bash
# The trace tool (dev/trace.sh) of this tree against another git revision's, both
# built and run in one GPU call (sm_90a): event times per case, a, b, a, b.
#   bash dev/trace_ab.sh --prepare REV     # here: REV's csrc/ and trace tool into dev/ab/
#   bash dev/trace_ab.sh gemm:128,7168,16384 dual:256,3072,4096 ...   # on the GPU machine
# dev/ab/ is untracked and not ignored, so the device tool carries it with the
# working tree; delete it before committing. TRACE_FLAGS and TRACE_PLAIN go to
# both builds: TRACE_PLAIN=1 (no trace points: the code the extension runs) for
# a verdict on a kernel change, with TRACE_PRE=icache for single calls as the
# extension sees them (dev/trace.cu). AB_STEP=build builds both and stops (to
# overlap the compile with other GPU work); AB_STEP=run runs what an earlier
# build of the same machine left.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --prepare ]; then
  [ $# -eq 2 ] || { echo "usage: bash dev/trace_ab.sh --prepare REV" >&2; exit 2; }
  rm -rf dev/ab && mkdir -p dev/ab/tool
  # REV's trace tool: dev/ now, tools/ in older revisions
  dir=$(git ls-tree --name-only "$2" dev/trace.cu tools/trace.cu | head -1 | xargs dirname)
  files=$(git ls-tree --name-only "$2" "$dir/trace.cu" "$dir/cuda_check.cuh" "$dir/probe_common.cuh")
  git archive "$2" csrc $files | tar -x -C dev/ab
  mv dev/ab/"$dir"/* dev/ab/tool/ && rmdir dev/ab/"$dir"
  echo "dev/ab: csrc/ and the trace tool of $(git rev-parse --short "$2") (delete before committing)"
  exit 0
fi
[ -d dev/ab/csrc ] || { echo "dev/ab/ is missing: bash dev/trace_ab.sh --prepare REV first" >&2; exit 2; }
step=${AB_STEP:-all}
[ $# -gt 0 ] || [ "$step" = build ] || { echo "usage: bash dev/trace_ab.sh CASE... (cases as for dev/trace.sh)" >&2; exit 2; }
if [ "$step" != run ]; then
  TRACE_DEF=-DNVFP4_TRACE
  [ "${TRACE_PLAIN:-0}" = 1 ] && TRACE_DEF=
  (cd dev/ab && nvcc -O3 -std=c++17 -lineinfo -DNVFP4_WITH_CUDA $TRACE_DEF --expt-relaxed-constexpr ${TRACE_FLAGS:-} \
    -gencode=arch=compute_90a,code=sm_90a -Icsrc -Itool -o /tmp/nvfp4_trace_a tool/trace.cu csrc/cuda/*.cu) &
  build_a=$!
  TRACE_BIN=/tmp/nvfp4_trace_b bash dev/trace.sh &
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
