#!/usr/bin/env bash
# Build, then Nsight Compute reports of one kernel on a few shapes (key
# sections and the stall reasons as text in $OUT/ncu_*.txt; KERNEL: a regex of
# the kernel's name, default the wgmma kernel). Usage:
#   bash dev/ncu.sh "M N K" "M N K dual" ...   (dev/one_call.py's arguments)
#   KERNEL=w4a16_kernel bash dev/ncu.sh "moe 8 uniform w4a16"   (dev/moe_call.py's)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; fi
MAX_JOBS=$(nproc) python3 -m pip install --no-build-isolation --no-deps -e . >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
for shape in "$@"; do
  tag=$(echo "$shape" | tr ' ' 'x')
  call="dev/one_call.py $shape"
  [ "${shape%% *}" = moe ] && call="dev/moe_call.py ${shape#moe }"  # an MoE block: its first kernel of the regex
  timeout 300 ncu --clock-control none -k regex:${KERNEL:-matmul_sm90} -s 2 -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats \
    --section InstructionStats --section SourceCounters --print-details all \
    python3 $call >"$OUT/ncu_$tag.txt" 2>&1
  echo "== $shape"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Issued Ipc|No Eligible|Active Warps Per|Eligible Warps|Stall|Warp Cycles Per Issued|Shared Memory|L2 Hit|DRAM Throughput|Registers|Grid Size|Cluster|Waves" "$OUT/ncu_$tag.txt" | head -40
done
