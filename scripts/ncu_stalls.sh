#!/usr/bin/env bash
# Nsight Compute warp-stall breakdown of the tensor-core kernel for one shape
# (after a build; KERNEL=gemv_kernel: the GEMV): bash scripts/ncu_stalls.sh M N K [dual]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
tag="$1x$2x$3${4:+_$4}"
timeout 300 ncu --clock-control none -k regex:${KERNEL:-matmul_sm90} -s 2 -c 1 --section SpeedOfLight --section WarpStateStats \
  --section SourceCounters --section LaunchStats --metrics smsp__pcsamp_warps_issue_stalled_imc_miss,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_sleeping,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_sample_count,gpu__time_duration.sum,sm__cycles_active.avg \
  python3 scripts/profile_gemm.py "$@" >"$OUT/stalls_$tag.txt" 2>&1
grep -E "Duration|pcsamp|cycles_active|time_duration|Stall|stall" "$OUT/stalls_$tag.txt" | head -40
