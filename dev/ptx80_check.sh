#!/usr/bin/env bash
# The sm_80 code path, tested on whatever GPU this is (a Hopper here): what
# every GPU but Hopper (sm_90a SASS) and B200 (sm_100a) runs. A100 and Ada run
# the sm_80 SASS; RTX 50, sm_103 and later the compute_80 PTX, compiled by the
# driver. Both come from the same source paths (__CUDA_ARCH__ = 800):
# numerics.cuh's prmt decoders instead of the e4m3 cvt, no wgmma kernel
# (DeviceInfo::sm90_code is false, so the planner never picks it), no
# programmatic dependent launch.
#
# The extension is built for sm_80 with compute_80 PTX, in a copy
# (dev/bench_ab.sh's build step, /tmp/nvfp4_ab/ptx80); a Hopper's driver
# JIT-compiles the PTX (sm_80 code does not run there). Then pytest runs
# PYTEST_ARGS against that copy, and tests/test_skinny.py once more with the
# skinny kernel forced wherever it can run.
#
#   bash dev/ptx80_check.sh
#   PYTEST_ARGS="tests/test_mma.py -x" bash dev/ptx80_check.sh
#   BUILD=0 bash dev/ptx80_check.sh   # the copy an earlier step of the same call built
#
# Speed of that path against another revision: dev/bench_ab.sh with
# AB_ARCH_NAME=8.0+PTX.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=/tmp/nvfp4_ab/ptx80
if ! python3 -c "import pytest" 2>/dev/null; then  # no network there: wheels carried in .whl/
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ "${BUILD:-1}" = 1 ]; then
  t0=$(date +%s)
  AB_VARIANTS='ptx80=' AB_ARCH_ptx80=8.0+PTX AB_STEP=build bash dev/bench_ab.sh 1 true || exit 1
  echo "built (sm_80 and compute_80 PTX) in $(($(date +%s) - t0)) s"
fi
rm -rf "$dir/tests" && cp -r "$root/tests" "$dir/tests"
cd "$dir" || exit 1
export PYTHONPATH=$dir${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import torch; print(torch.cuda.get_device_name(), 'capability', torch.cuda.get_device_capability())"
status=0
python3 -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-tests/test_mma.py tests/test_ops.py tests/test_skinny.py \
  tests/test_quantize.py tests/test_numerics.py} 2>&1 | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || status=1
NVFP4_FORCE_KERNEL=skinny python3 -m pytest -q -p no:cacheprovider tests/test_skinny.py 2>&1 | tail -2 | sed "s/^/skinny forced: /"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit $status
