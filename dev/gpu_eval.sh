#!/usr/bin/env bash
# The local GPU MODE evaluation on a GPU machine (no network): eval test and
# benchmark of every problem through the installed package's submission and
# through each one-file bundle, then a table comparing the two.
#   bash dev/gpu_eval.sh [problem ...]      (default: all four)
# Run after a build (dev/gpu_check.sh builds), or set BUILD=1. The bundles
# build at import with torch.utils.cpp_extension, which needs ninja: on a
# machine without network, carry a wheel in .whl/ (pip download ninja -d .whl).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
WORK=${EVAL_WORK:-/tmp/nvfp4_eval}; mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; fi  # as dev/gpu_check.sh
python3 -c "import ninja" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .whl/ninja*.whl
if [ "${BUILD:-0}" = 1 ]; then
  MAX_JOBS=$(nproc) python3 -m pip install --no-build-isolation --no-deps -e . >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
fi
problems=${*:-gemv gemm dual_gemm group_gemm}
for p in $problems; do
  python3 -m nvfp4_kernels.gpumode.bundle --problem "$p" -o "$WORK/bundle_$p.py"
  for who in package bundle; do
    sub=$([ $who = package ] && echo nvfp4_kernels/gpumode/competition.py || echo "$WORK/bundle_$p.py")
    for mode in test benchmark; do
      echo "== $p $mode ($who)"
      t0=$(date +%s)
      timeout 600 python3 -m nvfp4_kernels.gpumode.eval $mode --problem "$p" --submission "$sub" \
        --json "$WORK/${p}_${mode}_${who}.json" 2>"$WORK/${p}_${mode}_${who}.err" | tail -8
      echo "   rc=$? in $(( $(date +%s) - t0 ))s"
    done
  done
done
python3 - "$WORK" $problems <<'PY' | tee "$OUT/eval_summary.txt"
import json, os, sys
work, problems = sys.argv[1], sys.argv[2:]
def load(p, mode, who):
    f = os.path.join(work, f"{p}_{mode}_{who}.json")
    return json.load(open(f)) if os.path.exists(f) else None
print(f"{'problem':<11} {'shape':<58} {'pkg us':>9} {'bundle us':>9} {'ratio':>6} {'frac SOL':>8}")
for p in problems:
    for who in ("package", "bundle"):
        t = load(p, "test", who)
        rows = t["problems"][p] if t else []
        print(f"{p:<11} test ({who}): {sum(r['ok'] for r in rows)} of {len(rows)} passed"
              + ("" if all(r["ok"] for r in rows) else "  FAILED: " + "; ".join(str(r.get("error"))[:80] for r in rows if not r["ok"])))
    a, b = load(p, "benchmark", "package"), load(p, "benchmark", "bundle")
    if not (a and b):
        print(f"{p:<11} benchmark: missing results"); continue
    for ra, rb in zip(a["problems"][p], b["problems"][p]):
        shape = " ".join(f"{k}={v}" for k, v in ra["shape"].items() if k != "seed")
        if "stats" in ra and "stats" in rb:
            ma, mb = ra["stats"]["mean"] / 1e3, rb["stats"]["mean"] / 1e3
            print(f"{p:<11} {shape:<58} {ma:9.2f} {mb:9.2f} {mb / ma:6.3f} {ra['frac_sol']:8.2f}")
        else:
            print(f"{p:<11} {shape:<58} FAILED: {ra.get('error')} / {rb.get('error')}")
PY
