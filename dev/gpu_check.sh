#!/usr/bin/env bash
# One command for a GPU machine with no network: build the extension, run the
# whole test suite (GPU tests included; tests/test_kernels.py runs every kernel
# forced in child processes), compute-sanitizer over dev/sanitize_cases.py and
# the benchmarks, then print a short summary table last. Logs go to $OUT (or ./out).
#
#   bash dev/gpu_check.sh                 # everything
#   SANITIZE=0 bash dev/gpu_check.sh      # skip compute-sanitizer
#   BENCH_ARGS="--problem gemv" bash dev/gpu_check.sh
#   PYTEST_ARGS="tests/test_tensor_cores.py -x" BENCH_GEMV=0 bash dev/gpu_check.sh
#   BUILD=0 bash dev/gpu_check.sh         # the extension an earlier step of the same call built
#   BENCH=0 BENCH_GEMM=0 BENCH_GEMV=0 BENCH_MODELS=0 BENCH_MOE=0 bash dev/gpu_check.sh   # tests and sanitizers only
#   BENCH_MODELS_ARGS="--model 8b 70b" bash dev/gpu_check.sh  # the model layers' benchmark, every M
#   EXAMPLE=0 bash dev/gpu_check.sh      # skip examples/nvfp4_llama.py --config 8b (needs transformers)
#   SANITIZE_FORCES="auto mma:wk4" bash dev/gpu_check.sh      # the kernels forced under the sanitizers
#   SANITIZE_JOBS=24 SANITIZE_TIMEOUT=400 bash dev/gpu_check.sh  # sanitizer runs at once (default: cores), limit each
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
if ls .whl/*.whl >/dev/null 2>&1; then  # no network there: wheels carried in .whl/ (pytest, xdist, the oracles)
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# the suite over the machine's cores where pytest-xdist is there
XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n $(($(nproc) < 14 ? $(nproc) : 14))")

echo "== build"
echo "toolchain: CC=${CC:-unset} CXX=${CXX:-unset}; g++ on PATH: $(command -v g++) ($(g++ -dumpfullversion 2>/dev/null))"
# An extension built by a g++ other than the system's (one image points CXX at
# /opt/gcc) carried its own copy of parts of libstdc++ and crashed in
# std::ostream << long: build with the system compilers where they exist.
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; fi
t0=$(date +%s)
build_rc=0
if [ "${BUILD:-1}" = 1 ]; then
  MAX_JOBS=$(nproc) NVFP4_NVCC_FLAGS=-Xptxas=-v python3 -m pip install -v --no-build-isolation --no-deps -e . >"$OUT/build.log" 2>&1
  build_rc=$?
fi
build_s=$(($(date +%s) - t0))
grep -E "ptxas info +: (Used|Compiling)|spill" "$OUT/build.log" | grep -B1 -E "spill stores|Used" | grep -E "sm_90a|Used|spill" >"$OUT/ptxas.txt" || true
if [ $build_rc -ne 0 ]; then tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; fi
echo "built in ${build_s}s"

echo "== tests"
timeout ${TEST_TIMEOUT:-1500} python3 -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-$XDIST tests} 2>&1 | tee "$OUT/pytest.log" | tail -25
status=${PIPESTATUS[0]}
test_line=$(grep -E "[0-9]+ (passed|failed)" "$OUT/pytest.log" | tail -1)
san_line="skipped"
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer"
  san_line=""
  # each tool as the planner picks, then with kernels forced (NVFP4_FORCE_KERNEL): every
  # 128-row wgmma launch without the pre-pass, the mma.sync kernel everywhere in 64 x 64 tiles.
  # memcheck runs all parts in one process; racecheck, ten times slower, one process per part
  # (dev/sanitize_cases.py PART), all at once over the cores.
  mapfile -t plist < <(PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 dev/sanitize_cases.py --list)
  jobs="$OUT/sanitize_jobs.txt"; : >"$jobs"
  for force in ${SANITIZE_FORCES:-auto wgmma:decode mma:wk4}; do
    echo "memcheck|$force|" >>"$jobs"
    for part in "${plist[@]}"; do echo "racecheck|$force|$part" >>"$jobs"; done
  done
  san_one() {  # tool|force|part: one sanitizer run, its log and exit code under $OUT
    IFS='|' read -r tool force part <<<"$1"
    local log="$OUT/sanitize_${tool}_${force//:/_}_${part//[ ,.]/_}.log"
    ( if [ "$force" != auto ]; then export NVFP4_FORCE_KERNEL=$force; fi
      # its own process group, so that a timeout takes the sanitized python with it
      setsid timeout -s KILL ${SANITIZE_TIMEOUT:-500} compute-sanitizer --tool "$tool" --error-exitcode 3 \
        python3 dev/sanitize_cases.py ${part:+"$part"} >"$log" 2>&1
      echo $? >"$log.rc" )
  }
  export -f san_one; export OUT SANITIZE_TIMEOUT
  tr '\n' '\0' <"$jobs" | xargs -0 -P "${SANITIZE_JOBS:-$(nproc)}" -I{} bash -c 'san_one "$1"' _ {}
  pkill -9 -f "python3 dev/sanitize_cases.py" 2>/dev/null || true  # whatever a killed sanitizer left running
  while IFS='|' read -r tool force part; do
    log="$OUT/sanitize_${tool}_${force//:/_}_${part//[ ,.]/_}.log"
    rc=$(cat "$log.rc" 2>/dev/null || echo missing)
    case $rc in
      0) r=clean ;;
      137|124) r="timed out at $(grep '^case' "$log" | tail -1)"; status=1 ;;
      *) r="rc=$rc: $(grep -m1 -E 'ERROR SUMMARY|Error|wrong' "$log")"; status=1 ;;
    esac
    echo "sanitizer: $tool ($force${part:+, $part}): $r"
    [ "$rc" = 0 ] || san_line="$san_line $tool ($force${part:+, $part}): $r;"
  done <"$jobs"
  n_jobs=$(wc -l <"$jobs")
  [ -n "$san_line" ] || san_line="clean ($n_jobs runs: memcheck per forced kernel, racecheck per part)"
fi

if [ "${BENCH:-1}" = 1 ]; then
  echo "== benchmark"
  timeout ${BENCH_TIMEOUT:-900} python3 -m benchmarks.competition --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
fi
if [ "${BENCH_GEMM:-1}" = 1 ]; then
  echo "== gemm benchmark"
  timeout ${BENCH_TIMEOUT:-900} python3 -m benchmarks.bench_gemm --json "$OUT/gemm.json" --png "$OUT/gemm.png" ${BENCH_GEMM_ARGS:-} 2>&1 | tee "$OUT/gemm.log"
fi
if [ "${BENCH_MODELS:-1}" = 1 ]; then
  echo "== model layers benchmark"
  timeout ${BENCH_TIMEOUT:-900} python3 -m benchmarks.bench_models --json "$OUT/models.json" --png "$OUT/models.png" \
    ${BENCH_MODELS_ARGS:---model 8b --m 1,16,64,256,4096} 2>&1 | tee "$OUT/models.log"
fi
if [ "${BENCH_MOE:-1}" = 1 ]; then
  echo "== mixture-of-experts benchmark"
  timeout ${BENCH_TIMEOUT:-900} python3 -m benchmarks.bench_moe --json "$OUT/moe.json" --png "$OUT/moe.png" \
    ${BENCH_MOE_ARGS:---t 1,8,64,512,4096} 2>&1 | tee "$OUT/moe.log"
fi
if [ "${EXAMPLE:-1}" = 1 ] && python3 -c "import transformers, safetensors" 2>/dev/null; then
  echo "== example: a Llama-3-8B-sized model in NVFP4 (tokens/s)"
  timeout ${BENCH_TIMEOUT:-900} env PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 examples/nvfp4_llama.py \
    ${EXAMPLE_ARGS:---config 8b} 2>&1 | tee "$OUT/example.log"
fi
if [ "${BENCH_GEMV:-1}" = 1 ]; then
  echo "== gemv benchmark"
  timeout ${BENCH_TIMEOUT:-900} python3 -m benchmarks.bench_gemv --json "$OUT/gemv.json" --png "$OUT/gemv.png" 2>&1 | tee "$OUT/gemv.log"
fi

echo
echo "================ summary ================"
echo "device:    $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
echo "build:     ok in ${build_s}s"
echo "tests:     $test_line"
echo "sanitizer:$san_line"
if [ -f "$OUT/bench.log" ]; then
  grep -E "^ceilings" "$OUT/bench.log"
  grep -E "^(gemv|gemm|dual_gemm|group_gemm) " "$OUT/bench.log" | cut -c1-200
fi
if [ -f "$OUT/gemm.log" ]; then grep -E "competition shapes" "$OUT/gemm.log"; fi
if [ -f "$OUT/gemv.log" ]; then grep -E "^competition shapes" "$OUT/gemv.log"; fi
if [ -f "$OUT/models.log" ]; then grep -E " layer " "$OUT/models.log"; fi
if [ -f "$OUT/moe.log" ]; then grep -E " (w4a4|w4a16) " "$OUT/moe.log"; fi
if [ -f "$OUT/example.log" ]; then grep -E "^(w4a4|w4a16|decode)" "$OUT/example.log"; fi
# the exit status: the tests' and the sanitizers' (the benchmarks print their own failures)
exit "$status"
