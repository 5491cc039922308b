#!/usr/bin/env bash
# compute-sanitizer racecheck of the sanitize cases with hazard details (after a build).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
timeout 300 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 40 python3 scripts/sanitize_cases.py >"$OUT/racecheck.log" 2>&1
echo "rc=$?"
grep -E "Error|Warning|hazard|Race|at .*\.cu|Write|Read|SUMMARY" "$OUT/racecheck.log" | head -80
