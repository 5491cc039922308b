#!/usr/bin/env bash
# A/B of extension builds by benchmark, all in one GPU call: how a kernel change
# is judged (traced builds are not verdicts: dev/trace_ab.sh's plain mode or this).
#
#   AB_VARIANTS='base=;new=' bash dev/bench_ab.sh 3 python3 -m benchmarks.bench_gemv
#
# AB_VARIANTS: NAME=NVCC_FLAGS entries separated by ';'. Each variant is this
# tree's csrc/, nvfp4_kernels/, benchmarks/ and build files copied to
# /tmp/nvfp4_ab/NAME (each of them that dev/ab_NAME holds taken from there
# instead: put another revision there with `mkdir -p dev/ab_NAME && git archive
# REV csrc | tar -x -C dev/ab_NAME`, or its whole package with `git archive REV
# csrc nvfp4_kernels benchmarks setup.py pyproject.toml submission.py`;
# dev/ab_*/ is ignored by git), built with NVFP4_NVCC_FLAGS = its flags for sm_90a only
# (AB_ARCH_NAME: other targets, as TORCH_CUDA_ARCH_LIST, e.g. AB_ARCH_ptx=8.0+PTX),
# all builds at once. Then ROUNDS rounds run the command in each variant's copy
# in turn, output prefixed by "NAME rROUND|" (the copy has no tests/: pytest from
# the repository root would import the root's package; a benchmark's own check
# flags wrong results). dev/ab_summary.py condenses the logs to one table.
# AB_STEP=build stops after the builds; AB_STEP=run runs what an earlier build
# of the same machine left.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: AB_VARIANTS='a=FLAGS;b=FLAGS' bash dev/bench_ab.sh ROUNDS CMD..." >&2; exit 2; }
rounds=$1
shift
root=/tmp/nvfp4_ab
step=${AB_STEP:-all}
IFS=';' read -ra entries <<<"${AB_VARIANTS:?set AB_VARIANTS}"
names=()
for e in "${entries[@]}"; do names+=("${e%%=*}"); done
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; fi  # as dev/gpu_check.sh
if [ "$step" != run ]; then
  jobs=${MAX_JOBS:-$(($(nproc) / ${#entries[@]}))}
  [ "$jobs" -ge 1 ] || jobs=1
  pids=()
  for e in "${entries[@]}"; do
    name=${e%%=*} flags=${e#*=}
    avar=AB_ARCH_$name
    arch=${!avar:-9.0a}
    dir=$root/$name
    rm -rf "$dir" && mkdir -p "$dir"
    cp -r csrc nvfp4_kernels benchmarks setup.py pyproject.toml submission.py "$dir"/
    for part in csrc nvfp4_kernels benchmarks setup.py pyproject.toml submission.py; do  # another revision's
      if [ -e "dev/ab_$name/$part" ]; then rm -rf "${dir:?}/$part" && cp -r "dev/ab_$name/$part" "$dir/$part"; fi
    done
    (cd "$dir" && NVFP4_NVCC_FLAGS="$flags" TORCH_CUDA_ARCH_LIST="$arch" MAX_JOBS=$jobs \
      python3 setup.py build_ext --inplace >build.log 2>&1 || { echo "$name: build failed"; tail -20 build.log; exit 1; }) &
    pids+=($!)
  done
  t0=$(date +%s)
  fail=0
  for pid in "${pids[@]}"; do wait "$pid" || fail=1; done
  [ $fail = 0 ] || exit 1
  echo "built ${names[*]} in $(($(date +%s) - t0)) s"
fi
[ "$step" = build ] && exit 0
for r in $(seq 1 "$rounds"); do
  for name in "${names[@]}"; do
    (cd "$root/$name" && PYTHONPATH=$PWD "$@") 2>&1 | sed "s/^/$name r$r| /"
  done
done
